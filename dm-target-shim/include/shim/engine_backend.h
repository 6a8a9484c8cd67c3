// EngineBackend: a cachecore::Engine as what an NBD (or ublk) front end
// serves. Does not own the engine.
#pragma once

#include "cachecore/engine.h"
#include "shim/nbd_server.h"

namespace shim {

class EngineBackend : public NbdBackend {
 public:
  explicit EngineBackend(cachecore::Engine* engine) : engine_(engine) {}
  uint64_t size() const override { return engine_->identity().origin_size; }
  uint32_t preferred_block_size() const override { return 4096; }
  Status Read(uint64_t offset, void* buffer, uint64_t length) override {
    return engine_->Read(offset, buffer, length);
  }
  Status Write(uint64_t offset, const void* buffer, uint64_t length, bool fua) override {
    return engine_->Write(offset, buffer, length, fua);
  }
  Status Flush() override { return engine_->Sync(); }
  Status Trim(uint64_t offset, uint64_t length) override { return engine_->Discard(offset, length); }

 private:
  cachecore::Engine* engine_;
};

}  // namespace shim
