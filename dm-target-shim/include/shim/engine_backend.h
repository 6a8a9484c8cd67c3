// EngineBackend: a cachecore::Engine as the BlockBackend the front ends
// (NBD, ublk) serve. Does not own the engine.
#pragma once

#include <atomic>

#include "cachecore/engine/engine.h"
#include "shim/block_backend.h"

namespace shim {

class EngineBackend : public BlockBackend {
 public:
  // The cache's first volume, at 0.
  explicit EngineBackend(cachecore::Engine* engine)
      : EngineBackend(engine, 0, engine->identity().origin_size) {}
  // One volume of the cache: its bytes [0, size) at line-space bytes
  // [base, base + size) (cachecore::VolumeInfo).
  EngineBackend(cachecore::Engine* engine, uint64_t base, uint64_t size)
      : engine_(engine), base_(base), size_(size) {}
  uint64_t size() const override { return size_; }
  uint32_t preferred_block_size() const override { return 4096; }
  Status Read(uint64_t offset, void* buffer, uint64_t length) override {
    return engine_->Read(base_ + offset, buffer, length);
  }
  Status Write(uint64_t offset, const void* buffer, uint64_t length, bool fua) override {
    if (fua) fua_writes_.fetch_add(1, std::memory_order_relaxed);
    return engine_->Write(base_ + offset, buffer, length, fua);
  }
  Status Flush() override {
    flushes_.fetch_add(1, std::memory_order_relaxed);
    return engine_->Sync();
  }
  Status Trim(uint64_t offset, uint64_t length) override { return engine_->Discard(base_ + offset, length); }

  bool asynchronous() const override { return true; }
  void ReadAsync(uint64_t offset, void* buffer, uint64_t length, Completion* done) override {
    engine_->ReadAsync(base_ + offset, buffer, length, done);
  }
  void WriteAsync(uint64_t offset, const void* buffer, uint64_t length, bool fua,
                  Completion* done) override {
    if (fua) fua_writes_.fetch_add(1, std::memory_order_relaxed);
    engine_->WriteAsync(base_ + offset, buffer, length, fua, done);
  }
  void FlushAsync(Completion* done) override {
    flushes_.fetch_add(1, std::memory_order_relaxed);
    engine_->SyncAsync(done);
  }
  void TrimAsync(uint64_t offset, uint64_t length, Completion* done) override {
    engine_->DiscardAsync(base_ + offset, length, done);
  }

  // What the front ends asked for, counted here rather than in the engine
  // so that a test can see a kernel's FUA and flush requests arrive as such
  // (a front end that drops the FUA bit still writes the data).
  uint64_t fua_writes() const { return fua_writes_.load(std::memory_order_relaxed); }
  uint64_t flushes() const { return flushes_.load(std::memory_order_relaxed); }
  void ResetCounters() {
    fua_writes_.store(0, std::memory_order_relaxed);
    flushes_.store(0, std::memory_order_relaxed);
  }

 private:
  cachecore::Engine* engine_;
  const uint64_t base_, size_;
  std::atomic<uint64_t> fua_writes_{0}, flushes_{0};
};

}  // namespace shim
