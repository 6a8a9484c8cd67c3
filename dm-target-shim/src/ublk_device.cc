#include "shim/ublk_device.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/ublk_cmd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "ublk_queue.h"

namespace shim {

namespace {

constexpr uint16_t kMaxQueues = 8;      // a reactor thread each, one per core
constexpr uint16_t kDepth = 64;          // requests per queue
constexpr uint32_t kMaxIo = 512 * 1024;  // bytes per request

Status Errno(const std::string& what, int err) {
  return Status::IoError(what + ": " + std::strerror(err));
}

// One control command through io_uring: URING_CMD with a ublksrv_ctrl_cmd.
Status ControlCommand(io_uring* ring, int ctrl_fd, uint32_t op, const ublksrv_ctrl_cmd& cmd,
                      const char* what) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) return Status::Busy("ublk control ring is full");
  std::memset(static_cast<void*>(sqe), 0, 2 * sizeof(io_uring_sqe));  // SQE128
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = ctrl_fd;
  sqe->cmd_op = op;
  std::memcpy(sqe->cmd, &cmd, sizeof(cmd));
  int rc = io_uring_submit_and_wait(ring, 1);
  if (rc < 0) return Errno(std::string("ublk ") + what, -rc);
  io_uring_cqe* cqe = nullptr;
  rc = io_uring_wait_cqe(ring, &cqe);
  if (rc < 0) return Errno(std::string("ublk ") + what, -rc);
  int res = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  if (res < 0) return Errno(std::string("ublk ") + what, -res);
  return Status::Ok();
}

}  // namespace

struct UblkDevice::Impl {
  BlockBackend* backend = nullptr;
  uint64_t size = 0;
  int ctrl_fd = -1;
  io_uring ctrl{};
  bool ctrl_ready = false;
  ublksrv_ctrl_dev_info info{};
  int char_fd = -1;
  std::string device;
  std::vector<std::thread> queues;
  std::mutex start_mu;
  std::condition_variable start_cv;
  uint16_t queues_set_up = 0;    // queues that set up or failed to
  bool start_decided = false;    // all reported: they fetch if none failed
  uint16_t queues_fetching = 0;  // queues whose fetches are in the kernel
  Status queue_failure;
  bool added = false, started = false, recovered = false;

  Status Command(uint32_t op, const char* what, void* buf = nullptr, uint16_t len = 0,
                 uint64_t data0 = 0) {
    ublksrv_ctrl_cmd cmd{};
    cmd.dev_id = info.dev_id;
    cmd.queue_id = static_cast<uint16_t>(-1);
    cmd.addr = reinterpret_cast<uint64_t>(buf);
    cmd.len = len;
    cmd.data[0] = data0;
    return ControlCommand(&ctrl, ctrl_fd, op, cmd, what);
  }

  Status Open() {
    ctrl_fd = open("/dev/ublk-control", O_RDWR | O_CLOEXEC);
    if (ctrl_fd < 0 && std::system("modprobe ublk_drv >/dev/null 2>&1") == 0) {
      ctrl_fd = open("/dev/ublk-control", O_RDWR | O_CLOEXEC);
    }
    if (ctrl_fd < 0) return Status::NotSupported("the kernel has no ublk (/dev/ublk-control)");
    int rc = io_uring_queue_init(4, &ctrl, IORING_SETUP_SQE128);
    if (rc < 0) return Errno("io_uring for ublk control", -rc);
    ctrl_ready = true;
    return Status::Ok();
  }

  Status Add() {
    info.nr_hw_queues = static_cast<uint16_t>(
        std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, kMaxQueues));
    info.queue_depth = kDepth;
    info.max_io_buf_bytes = kMaxIo;
    info.dev_id = static_cast<uint32_t>(-1);  // any free id
    info.ublksrv_pid = getpid();
    // Reissue: requests the dead daemon had taken go to the next one, so a
    // filesystem above never sees them fail.
    info.flags = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
    CACHECORE_RETURN_IF_ERROR(Command(UBLK_CMD_ADD_DEV, "add", &info, sizeof(info)));
    added = true;
    device = "/dev/ublkb" + std::to_string(info.dev_id);
    ublk_params p{};
    p.len = sizeof(p);
    p.types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
    p.basic.attrs = UBLK_ATTR_VOLATILE_CACHE | UBLK_ATTR_FUA;
    p.basic.logical_bs_shift = 9;
    p.basic.physical_bs_shift = 12;
    p.basic.io_opt_shift = 12;
    p.basic.io_min_shift = 9;
    p.basic.max_sectors = kMaxIo >> 9;
    p.basic.dev_sectors = size >> 9;
    p.discard.discard_granularity = 4096;
    p.discard.max_discard_sectors = UINT32_MAX >> 9;
    p.discard.max_write_zeroes_sectors = UINT32_MAX >> 9;
    p.discard.max_discard_segments = 1;
    return Command(UBLK_CMD_SET_PARAMS, "set parameters", &p, sizeof(p));
  }

  // A thread per queue, each serving its tags on a reactor of its own.
  // Two steps: every queue sets up, and only if all could do they fetch
  // (a queue fetching on a device that never starts would wait forever);
  // returns once every queue's fetches are in the kernel.
  Status StartQueues() {
    const uint16_t n = info.nr_hw_queues;
    for (uint16_t q = 0; q < n; ++q) {
      queues.emplace_back([this, q] {
        UblkQueue queue(backend, char_fd, q, info.queue_depth, info.max_io_buf_bytes);
        queue.Run([this](const Status& s) { return QueueSetUp(s); }, [this] { QueueFetching(); });
      });
    }
    std::unique_lock lock(start_mu);
    start_cv.wait(lock, [&] { return queues_set_up == n; });
    start_decided = true;
    start_cv.notify_all();
    if (!queue_failure.ok()) {
      lock.unlock();
      JoinQueues();
      return queue_failure;
    }
    start_cv.wait(lock, [&] { return queues_fetching == n; });
    return Status::Ok();
  }

  // A queue's thread: reports its set-up, waits for every other queue's,
  // and says whether to go on.
  bool QueueSetUp(const Status& s) {
    std::unique_lock lock(start_mu);
    if (!s.ok() && queue_failure.ok()) queue_failure = s;
    ++queues_set_up;
    start_cv.notify_all();
    start_cv.wait(lock, [this] { return start_decided; });
    return queue_failure.ok();
  }

  void QueueFetching() {
    std::lock_guard lock(start_mu);
    ++queues_fetching;
    start_cv.notify_all();
  }

  void JoinQueues() {
    for (auto& t : queues) t.join();
    queues.clear();
  }

  Status Begin() {
    std::string cdev = "/dev/ublkc" + std::to_string(info.dev_id);
    for (int i = 0; i < 100 && char_fd < 0; ++i) {  // devtmpfs makes the node
      char_fd = open(cdev.c_str(), O_RDWR | O_CLOEXEC);
      if (char_fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (char_fd < 0) return Errno("cannot open " + cdev, errno);
    CACHECORE_RETURN_IF_ERROR(StartQueues());
    // START_DEV (END_USER_RECOVERY when taking a device back) returns once
    // every tag of every queue has fetched.
    uint32_t op = recovered ? UBLK_CMD_END_USER_RECOVERY : UBLK_CMD_START_DEV;
    CACHECORE_RETURN_IF_ERROR(Command(op, recovered ? "end recovery" : "start", nullptr, 0,
                                      static_cast<uint64_t>(getpid())));
    started = true;
    return Status::Ok();
  }

  // Takes back /dev/ublkb<id> when a dead daemon left it quiesced. OK and
  // recovered == false when there is nothing to take back.
  Status Recover(int id) {
    ublksrv_ctrl_dev_info probe{};
    info.dev_id = static_cast<uint32_t>(id);
    if (!Command(UBLK_CMD_GET_DEV_INFO, "get info", &probe, sizeof(probe)).ok() ||
        probe.state != UBLK_S_DEV_QUIESCED) {
      info = ublksrv_ctrl_dev_info{};
      return Status::Ok();
    }
    // Its queues, depth and buffer size stay as they were made (a queue
    // per tag set the kernel keeps).
    if (probe.nr_hw_queues == 0 || probe.nr_hw_queues > kMaxQueues ||
        probe.queue_depth == 0 || probe.queue_depth > UBLK_MAX_QUEUE_DEPTH ||
        probe.max_io_buf_bytes == 0 || probe.max_io_buf_bytes > kMaxIo) {
      return Status::Mismatch("/dev/ublkb" + std::to_string(id) + " has a queue layout this daemon cannot serve");
    }
    info = probe;
    CACHECORE_RETURN_IF_ERROR(Command(UBLK_CMD_START_USER_RECOVERY, "start recovery"));
    added = true;
    recovered = true;
    device = "/dev/ublkb" + std::to_string(id);
    return Status::Ok();
  }

  Status End() {
    Status s;
    // Also when the device never started (START_DEV or END_USER_RECOVERY
    // failed): the stop aborts the queues' fetches, so their threads end.
    if (started) {
      s = Command(UBLK_CMD_STOP_DEV, "stop");
    } else if (queues_fetching > 0) {
      (void)Command(UBLK_CMD_STOP_DEV, "stop");
    }
    started = false;
    JoinQueues();
    queues_fetching = 0;  // End may run again (Disconnect, then the destructor)
    if (char_fd >= 0) close(char_fd);
    char_fd = -1;
    if (added) {
      Status d = Command(UBLK_CMD_DEL_DEV, "delete");
      if (s.ok()) s = d;
      added = false;
    }
    if (ctrl_ready) io_uring_queue_exit(&ctrl);
    ctrl_ready = false;
    if (ctrl_fd >= 0) close(ctrl_fd);
    ctrl_fd = -1;
    return s;
  }
};

UblkDevice::UblkDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UblkDevice::~UblkDevice() { (void)Disconnect(); }
const std::string& UblkDevice::device() const { return impl_->device; }
Status UblkDevice::Disconnect() { return impl_->End(); }

int UblkDevice::id() const { return static_cast<int>(impl_->info.dev_id); }
bool UblkDevice::recovered() const { return impl_->recovered; }

Result<std::unique_ptr<UblkDevice>> UblkDevice::Start(BlockBackend* backend, uint64_t size_bytes,
                                                        int recover_id) {
  auto impl = std::make_unique<Impl>();
  impl->backend = backend;
  impl->size = size_bytes;
  Status s = impl->Open();
  if (s.ok() && recover_id >= 0) s = impl->Recover(recover_id);
  if (s.ok() && !impl->recovered) s = impl->Add();
  if (s.ok()) s = impl->Begin();
  if (!s.ok()) {
    (void)impl->End();
    return s;
  }
  return std::unique_ptr<UblkDevice>(new UblkDevice(std::move(impl)));
}

}  // namespace shim
