#include "cachecore/devices/memory_device.h"

#include <array>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace cachecore {

namespace {

constexpr uint64_t kPageSize = 4096;
constexpr size_t kShards = 64;

class MemoryDevice : public BlockDevice {
 public:
  MemoryDevice(uint64_t size, std::string name) : size_(size), name_(std::move(name)) {}

  uint64_t size_bytes() const override { return size_; }
  std::string identity() const override { return "mem:" + name_; }
  bool supports_discard() const override { return true; }
  bool discards_without_waiting() const override { return true; }  // memory: at once

  Status SubmitAndWait(std::span<IoRequest> requests) override {
    Status first;
    for (IoRequest& r : requests) {
      r.status = CheckRequest(r);
      if (r.status.ok()) Execute(r);
      if (!r.status.ok() && first.ok()) first = r.status;
    }
    return first;
  }

 private:
  using Page = std::array<uint8_t, kPageSize>;
  struct Shard {
    std::mutex mu;
    std::unordered_map<uint64_t, std::unique_ptr<Page>> pages;
  };

  Shard& ShardOf(uint64_t page) { return shards_[page % kShards]; }

  // Calls fn(page index, offset in page, bytes, offset in request) per page piece.
  template <typename Fn>
  void ForEachPiece(uint64_t offset, uint64_t length, Fn fn) {
    uint64_t done = 0;
    while (done < length) {
      uint64_t pos = offset + done;
      uint64_t in_page = pos % kPageSize;
      uint64_t n = std::min(length - done, kPageSize - in_page);
      fn(pos / kPageSize, in_page, n, done);
      done += n;
    }
  }

  void Execute(IoRequest& r) {
    auto* buf = static_cast<uint8_t*>(r.buffer);
    switch (r.op) {
      case IoOp::kRead:
        ForEachPiece(r.offset, r.length, [&](uint64_t page, uint64_t in, uint64_t n, uint64_t at) {
          Shard& s = ShardOf(page);
          std::lock_guard lock(s.mu);
          auto it = s.pages.find(page);
          if (it == s.pages.end()) std::memset(buf + at, 0, n);
          else std::memcpy(buf + at, it->second->data() + in, n);
        });
        break;
      case IoOp::kWrite:
        ForEachPiece(r.offset, r.length, [&](uint64_t page, uint64_t in, uint64_t n, uint64_t at) {
          Shard& s = ShardOf(page);
          std::lock_guard lock(s.mu);
          auto& slot = s.pages[page];
          if (!slot) slot = std::make_unique<Page>(Page{});
          std::memcpy(slot->data() + in, buf + at, n);
        });
        break;
      case IoOp::kDiscard:
        ForEachPiece(r.offset, r.length, [&](uint64_t page, uint64_t in, uint64_t n, uint64_t) {
          Shard& s = ShardOf(page);
          std::lock_guard lock(s.mu);
          auto it = s.pages.find(page);
          if (it == s.pages.end()) return;
          if (n == kPageSize) s.pages.erase(it);
          else std::memset(it->second->data() + in, 0, n);
        });
        break;
      case IoOp::kFlush:
        break;  // memory is as durable as it gets
    }
  }

  uint64_t size_;
  std::string name_;
  std::array<Shard, kShards> shards_;
};

}  // namespace

std::unique_ptr<BlockDevice> NewMemoryDevice(uint64_t size_bytes, const std::string& name) {
  return std::make_unique<MemoryDevice>(size_bytes, name);
}

}  // namespace cachecore
