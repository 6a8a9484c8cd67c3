// cachectl-hdd-emu: serves a file over NBD with the timing of a 7,200 rpm
// disk (hdd_model.h): one actuator, requests served one at a time, the
// next one chosen NCQ-style among the queued ones by shortest positioning
// time. The benchmarks' "uncached" disk and every configuration's origin.
//
// usage: cachectl-hdd-emu --file PATH --socket PATH [--queue-depth N] [--fifo]
// Runs until SIGTERM or SIGINT.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "hdd_model.h"
#include "shim/block_backend.h"
#include "shim/nbd_server.h"

namespace {

using Clock = std::chrono::steady_clock;

class HddBackend : public shim::BlockBackend {
 public:
  HddBackend(int fd, uint64_t size, unsigned ncq_depth)
      : fd_(fd), size_(size), ncq_depth_(ncq_depth), model_(size), start_(Clock::now()),
        disk_([this] { DiskLoop(); }) {}
  ~HddBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    disk_.join();
  }

  uint64_t size() const override { return size_; }
  uint32_t preferred_block_size() const override { return 4096; }
  shim::Status Read(uint64_t offset, void* buffer, uint64_t length) override {
    Serve(offset, length);
    return pread(fd_, buffer, length, static_cast<off_t>(offset)) == static_cast<ssize_t>(length)
               ? shim::Status::Ok() : shim::Status::IoError("read");
  }
  shim::Status Write(uint64_t offset, const void* buffer, uint64_t length, bool) override {
    Serve(offset, length);  // no write cache: every write waits for the platter
    return pwrite(fd_, buffer, length, static_cast<off_t>(offset)) == static_cast<ssize_t>(length)
               ? shim::Status::Ok() : shim::Status::IoError("write");
  }
  shim::Status Flush() override { return shim::Status::Ok(); }
  shim::Status Trim(uint64_t, uint64_t) override { return shim::Status::Ok(); }

 private:
  struct Pending {
    uint64_t offset, length;
    bool done = false;
  };

  double Now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  // Queues the request for the actuator and returns once it was served.
  void Serve(uint64_t offset, uint64_t length) {
    Pending p{offset, length};
    std::unique_lock lock(mu_);
    queue_.push_back(&p);
    work_.notify_all();
    done_.wait(lock, [&] { return p.done; });
  }

  void DiskLoop() {
    std::unique_lock lock(mu_);
    while (true) {
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      // NCQ: of the first ncq_depth_ queued, the one the head reaches first.
      double now = Now();
      size_t best = 0;
      double best_time = 1e9;
      for (size_t i = 0; i < queue_.size() && i < ncq_depth_; ++i) {
        double t = model_.PositioningTime(queue_[i]->offset, now);
        if (t < best_time) best_time = t, best = i;
      }
      Pending* p = queue_[best];
      queue_.erase(queue_.begin() + static_cast<long>(best));
      double service = model_.ServiceTime(p->offset, p->length, now);
      model_.Served(p->offset, p->length);
      lock.unlock();
      std::this_thread::sleep_until(start_ + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(now + service)));
      lock.lock();
      p->done = true;
      done_.notify_all();
    }
  }

  int fd_;
  uint64_t size_;
  unsigned ncq_depth_;
  bench::HddModel model_;
  Clock::time_point start_;
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Pending*> queue_;
  bool stop_ = false;
  std::thread disk_;
};

int Usage() {
  std::fprintf(stderr, "usage: cachectl-hdd-emu --file PATH --socket PATH [--queue-depth N] [--fifo]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, socket;
  unsigned depth = 32;
  bool fifo = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--file" && i + 1 < argc) file = argv[++i];
    else if (a == "--socket" && i + 1 < argc) socket = argv[++i];
    else if (a == "--queue-depth" && i + 1 < argc) depth = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--fifo") fifo = true;
    else return Usage();
  }
  if (file.empty() || socket.empty() || depth == 0 || depth > 256) return Usage();
  int fd = open(file.c_str(), O_RDWR | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    std::fprintf(stderr, "cachectl-hdd-emu: cannot open %s: %s\n", file.c_str(), std::strerror(errno));
    return 1;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  HddBackend backend(fd, static_cast<uint64_t>(st.st_size), fifo ? 1 : depth);
  shim::NbdServerOptions options;
  options.unix_path = socket;
  options.worker_threads = depth;  // requests the disk can have queued
  auto server = shim::NbdServer::Start(&backend, options);
  if (!server.ok()) {
    std::fprintf(stderr, "cachectl-hdd-emu: %s\n", server.status().ToString().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  server.value()->Stop();
  close(fd);
  return 0;
}
