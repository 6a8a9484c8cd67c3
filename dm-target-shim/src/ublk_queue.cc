#include "ublk_queue.h"

#include <linux/ublk_cmd.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ublk_request.h"

namespace shim {

using cachecore::Reactor;

// A tag: its FETCH or COMMIT_AND_FETCH on the ring (ReactorOp), its request
// on the backend (UblkRequestRun), and the way back to the queue's thread
// when the backend answers on another (ReactorTask).
struct UblkQueue::Tag final : UblkRequestRun, cachecore::ReactorOp, cachecore::ReactorTask {
  UblkQueue* queue = nullptr;
  uint16_t tag = 0;
  uint8_t* buffer = nullptr;
  int32_t result = 0;

  void OnComplete(int res) override { queue->Fetched(*this, res); }
  void Finished(int32_t r) override {
    result = r;
    if (Reactor::Current() == queue->reactor_.get()) queue->Commit(*this);
    else queue->reactor_->Post(this);
  }
  void Run() override { queue->Commit(*this); }
};

// The first FETCH of every tag, on the reactor's thread once it runs.
class UblkQueue::FetchAll final : public cachecore::ReactorTask {
 public:
  explicit FetchAll(UblkQueue* q) : q_(q) {}
  void Run() override {
    for (auto& t : q_->tags_) {
      ublksrv_io_cmd cmd{q_->id_, t->tag, -1, reinterpret_cast<uint64_t>(t->buffer)};
      q_->reactor_->Command(q_->char_fd_, UBLK_IO_FETCH_REQ, &cmd, sizeof(cmd), t.get());
    }
    // Once submitted, a STOP_DEV finds them and aborts them: stopping a
    // device that then fails to start does not hang on them.
    q_->reactor_->Submit();
    q_->fetching_();
  }

 private:
  UblkQueue* q_;
};

UblkQueue::UblkQueue(BlockBackend* backend, int char_fd, uint16_t id, uint16_t depth,
                     uint32_t max_io)
    : backend_(backend), char_fd_(char_fd), id_(id), depth_(depth), max_io_(max_io) {}

UblkQueue::~UblkQueue() {
  if (descs_ != nullptr) munmap(const_cast<ublksrv_io_desc*>(descs_), descs_bytes_);
  if (buffers_ != nullptr) munmap(buffers_, size_t{depth_} * max_io_);
}

Status UblkQueue::SetUp() {
  // Room for every tag's command and the cache reads of as many hits.
  Result<std::unique_ptr<Reactor>> reactor = Reactor::Create(2 * depth_, /*commands=*/true);
  if (!reactor.ok()) return reactor.status();
  reactor_ = std::move(reactor.value());
  auto page_round = [](size_t n) { return (n + 4095) & ~size_t{4095}; };
  descs_bytes_ = page_round(depth_ * sizeof(ublksrv_io_desc));
  off_t at = UBLKSRV_CMD_BUF_OFFSET +
             static_cast<off_t>(id_) * page_round(UBLK_MAX_QUEUE_DEPTH * sizeof(ublksrv_io_desc));
  void* map = mmap(nullptr, descs_bytes_, PROT_READ, MAP_SHARED | MAP_POPULATE, char_fd_, at);
  if (map == MAP_FAILED) {
    return Status::IoError(std::string("ublk queue descriptors: ") + std::strerror(errno));
  }
  descs_ = static_cast<const ublksrv_io_desc*>(map);
  // Anonymous memory: pages are backed only once a request of that size
  // has used them (64 tags x 512 KiB would otherwise be resident at once).
  void* bufs = mmap(nullptr, size_t{depth_} * max_io_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (bufs == MAP_FAILED) {
    return Status::IoError(std::string("ublk queue buffers: ") + std::strerror(errno));
  }
  buffers_ = static_cast<uint8_t*>(bufs);
  for (uint16_t t = 0; t < depth_; ++t) {
    auto tag = std::make_unique<Tag>();
    tag->queue = this;
    tag->tag = t;
    tag->buffer = buffers_ + size_t{t} * max_io_;
    tags_.push_back(std::move(tag));
  }
  return Status::Ok();
}

void UblkQueue::Run(const std::function<bool(const Status&)>& set_up,
                    const std::function<void()>& fetching) {
  Status s = SetUp();
  if (!set_up(s) || !s.ok()) return;
  fetching_ = fetching;
  live_ = depth_;
  FetchAll fetch(this);
  reactor_->Post(&fetch);
  reactor_->Run();
}

void UblkQueue::Fetched(Tag& tag, int result) {
  if (result == UBLK_IO_RES_OK) return tag.Start(*backend_, descs_[tag.tag], tag.buffer);
  // UBLK_IO_RES_ABORT: the device is stopping, and this tag with it. Any
  // other answer is the kernel refusing the command: said, as the tag is
  // lost to the queue.
  if (result != UBLK_IO_RES_ABORT) {
    std::fprintf(stderr, "ublk queue %u tag %u: the driver refused its command: %s\n", id_,
                 tag.tag, std::strerror(result < 0 ? -result : result));
  }
  if (--live_ == 0) reactor_->Stop();
}

void UblkQueue::Commit(Tag& tag) {
  ublksrv_io_cmd cmd{id_, tag.tag, tag.result, reinterpret_cast<uint64_t>(tag.buffer)};
  reactor_->Command(char_fd_, UBLK_IO_COMMIT_AND_FETCH_REQ, &cmd, sizeof(cmd), &tag);
}

}  // namespace shim
