#include "shim/ublk_device.h"

#include <fcntl.h>
#include <liburing.h>
#include <linux/ublk_cmd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cachecore/devices/block_device.h"
#include "ublk_request.h"

namespace shim {

using cachecore::AlignedBuffer;

namespace {

constexpr uint16_t kQueues = 2;          // one thread each; the machines have 2 cores
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
  std::atomic<int> queues_fetching{0};
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
    info.nr_hw_queues = kQueues;
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

  void Queue(uint16_t q) {
    io_uring ring{};
    if (io_uring_queue_init(kDepth * 2, &ring, IORING_SETUP_SQE128) < 0) return;
    size_t desc_bytes = (kDepth * sizeof(ublksrv_io_desc) + 4095) & ~size_t{4095};
    off_t map_at = UBLKSRV_CMD_BUF_OFFSET +
                   static_cast<off_t>(q) * ((UBLK_MAX_QUEUE_DEPTH * sizeof(ublksrv_io_desc) + 4095) & ~size_t{4095});
    void* map = mmap(nullptr, desc_bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, char_fd, map_at);
    if (map == MAP_FAILED) {
      io_uring_queue_exit(&ring);
      return;
    }
    auto* descs = static_cast<const ublksrv_io_desc*>(map);
    std::vector<AlignedBuffer> bufs;
    for (int t = 0; t < kDepth; ++t) bufs.emplace_back(kMaxIo);
    auto submit = [&](uint32_t op, uint16_t tag, int32_t result) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) {  // full: hand what is queued to the kernel, then retry
        io_uring_submit(&ring);
        sqe = io_uring_get_sqe(&ring);
        if (sqe == nullptr) return;
      }
      std::memset(static_cast<void*>(sqe), 0, 2 * sizeof(io_uring_sqe));
      sqe->opcode = IORING_OP_URING_CMD;
      sqe->fd = char_fd;
      sqe->cmd_op = op;
      ublksrv_io_cmd cmd{q, tag, result, reinterpret_cast<uint64_t>(bufs[tag].data())};
      std::memcpy(sqe->cmd, &cmd, sizeof(cmd));
      io_uring_sqe_set_data64(sqe, tag);
    };
    for (uint16_t t = 0; t < kDepth; ++t) submit(UBLK_IO_FETCH_REQ, t, -1);
    io_uring_submit(&ring);
    ++queues_fetching;
    int live = kDepth;
    while (live > 0) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring, &cqe) < 0) break;
      uint16_t tag = static_cast<uint16_t>(io_uring_cqe_get_data64(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (res != UBLK_IO_RES_OK) {  // the device is stopping (ABORT) or failed
        --live;
        continue;
      }
      submit(UBLK_IO_COMMIT_AND_FETCH_REQ, tag, RunUblkRequest(*backend, descs[tag], bufs[tag].data()));
      io_uring_submit(&ring);
    }
    munmap(map, desc_bytes);
    io_uring_queue_exit(&ring);
  }

  Status Begin() {
    std::string cdev = "/dev/ublkc" + std::to_string(info.dev_id);
    for (int i = 0; i < 100 && char_fd < 0; ++i) {  // devtmpfs makes the node
      char_fd = open(cdev.c_str(), O_RDWR | O_CLOEXEC);
      if (char_fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (char_fd < 0) return Errno("cannot open " + cdev, errno);
    for (uint16_t q = 0; q < kQueues; ++q) queues.emplace_back([this, q] { Queue(q); });
    while (queues_fetching.load() < kQueues) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
    if (probe.nr_hw_queues != kQueues || probe.queue_depth != kDepth) {
      return Status::Mismatch("/dev/ublkb" + std::to_string(id) + " has another queue layout");
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
    if (started) s = Command(UBLK_CMD_STOP_DEV, "stop");
    started = false;
    for (auto& t : queues) t.join();
    queues.clear();
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
