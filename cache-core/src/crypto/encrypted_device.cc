#include "cachecore/crypto/encrypted_device.h"

#include <bit>
#include <cstdlib>
#include <utility>
#include <vector>

namespace cachecore {

namespace {

// Bounce buffers for writes in flight, per thread: a write is mostly
// completed on the thread that submitted it (its reactor), so the buffer
// goes back where it came from. Sizes are powers of two from 4 KiB; up to
// kKeptBytes of them are kept (a reactor's usual writes in flight), the
// rest freed.
class BouncePool {
 public:
  static constexpr size_t kKeptBytes = 16 << 20;
  ~BouncePool() {
    for (auto [size, p] : free_) std::free(p);
  }
  static size_t SizeFor(uint64_t length) { return std::bit_ceil(std::max<uint64_t>(length, kCipherUnit)); }
  uint8_t* Take(uint64_t length) {
    const size_t size = SizeFor(length);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].first != size) continue;
      uint8_t* p = free_[i].second;
      free_[i] = free_.back();
      free_.pop_back();
      kept_ -= size;
      return p;
    }
    void* p = nullptr;
    return posix_memalign(&p, kIoAlignment, size) == 0 ? static_cast<uint8_t*>(p) : nullptr;
  }
  void Give(uint8_t* p, uint64_t length) {
    const size_t size = SizeFor(length);
    if (kept_ + size > kKeptBytes) return std::free(p);
    free_.emplace_back(size, p);
    kept_ += size;
  }

 private:
  std::vector<std::pair<size_t, uint8_t*>> free_;
  size_t kept_ = 0;  // bytes in free_
};

BouncePool& Pool() {
  thread_local BouncePool pool;
  return pool;
}

class EncryptedDevice final : public BlockDevice, IoCompletion {
 public:
  EncryptedDevice(BlockDevice* inner, std::shared_ptr<const CacheKey> key, uint64_t data_offset)
      : inner_(inner), key_(std::move(key)), data_offset_(data_offset) {}

  uint64_t size_bytes() const override { return inner_->size_bytes(); }
  std::string identity() const override { return inner_->identity(); }
  bool supports_discard() const override { return inner_->supports_discard(); }
  bool discards_without_waiting() const override { return inner_->discards_without_waiting(); }

  Status SubmitAndWait(std::span<IoRequest> requests) override {
    for (const IoRequest& r : requests) {
      if (Status s = CheckUnits(r); !s.ok()) return FailAll(requests, s);
    }
    // Writes go out from one bounce buffer of this thread's; the caller's
    // buffers are put back before returning.
    thread_local AlignedBuffer bounce;
    thread_local std::vector<void*> plain;
    uint64_t bytes = 0;
    for (const IoRequest& r : requests) bytes += IsCipheredWrite(r) ? r.length : 0;
    if (bytes > 0) bounce.Reserve(bytes);
    plain.assign(requests.size(), nullptr);
    Status crypt;
    uint64_t at = 0;
    for (size_t i = 0; i < requests.size() && crypt.ok(); ++i) {
      IoRequest& r = requests[i];
      if (!IsCipheredWrite(r)) continue;
      uint8_t* out = bounce.data() + at;
      crypt = key_->Encrypt(r.offset, Bytes(r.buffer), out, r.length);
      plain[i] = r.buffer;
      r.buffer = out;
      at += r.length;
    }
    Status s = crypt.ok() ? inner_->SubmitAndWait(requests) : crypt;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (plain[i] != nullptr) requests[i].buffer = plain[i];
    }
    if (!crypt.ok()) return FailAll(requests, crypt);  // nothing was submitted
    for (IoRequest& r : requests) {
      if (!Ciphered(r) || r.op != IoOp::kRead || !r.status.ok()) continue;
      r.status = key_->Decrypt(r.offset, Bytes(r.buffer), Bytes(r.buffer), r.length);
      if (!r.status.ok() && s.ok()) s = r.status;
    }
    return s;
  }

  void Submit(AsyncIo& io) override {
    IoRequest& r = io.request;
    if (!Ciphered(r)) return inner_->Submit(io);
    if (Status s = CheckUnits(r); !s.ok()) return Fail(io, s);
    if (r.op == IoOp::kWrite) {
      uint8_t* bounce = Pool().Take(r.length);
      if (bounce == nullptr) return Fail(io, Status::NoSpace("no memory for an encrypted write"));
      if (Status s = key_->Encrypt(r.offset, Bytes(r.buffer), bounce, r.length); !s.ok()) {
        Pool().Give(bounce, r.length);
        return Fail(io, s);
      }
      io.cipher_plain = r.buffer;
      r.buffer = bounce;
    }
    io.cipher_done = io.done;
    io.done = this;
    inner_->Submit(io);
  }

  // The inner device's completion: the caller's buffer and completion back.
  void IoDone(AsyncIo& io) override {
    IoRequest& r = io.request;
    io.done = io.cipher_done;
    io.cipher_done = nullptr;
    if (r.op == IoOp::kWrite) {
      Pool().Give(Bytes(r.buffer), r.length);
      r.buffer = io.cipher_plain;
      io.cipher_plain = nullptr;
    } else if (r.status.ok()) {
      r.status = key_->Decrypt(r.offset, Bytes(r.buffer), Bytes(r.buffer), r.length);
    }
    io.done->IoDone(io);
  }

 private:
  static uint8_t* Bytes(void* p) { return static_cast<uint8_t*>(p); }

  bool IsCipheredWrite(const IoRequest& r) const { return r.op == IoOp::kWrite && Ciphered(r); }

  // A read or write of the data area.
  bool Ciphered(const IoRequest& r) const {
    return (r.op == IoOp::kRead || r.op == IoOp::kWrite) && r.offset + r.length > data_offset_;
  }

  Status CheckUnits(const IoRequest& r) const {
    if (!Ciphered(r)) return Status::Ok();
    if (r.offset < data_offset_) return Status::InvalidArgument("a request spans the start of the encrypted area");
    if (r.offset % kCipherUnit != 0 || r.length % kCipherUnit != 0 || r.length == 0) {
      return Status::InvalidArgument("encrypted I/O must be whole 4 KiB units");
    }
    return CheckRequest(r);
  }

  // Each request's own status says it failed, as the caller reads them.
  static Status FailAll(std::span<IoRequest> requests, const Status& s) {
    for (IoRequest& r : requests) r.status = s;
    return s;
  }

  void Fail(AsyncIo& io, Status s) {
    io.request.status = std::move(s);
    io.done->IoDone(io);
  }

  BlockDevice* inner_;
  std::shared_ptr<const CacheKey> key_;
  uint64_t data_offset_;
};

}  // namespace

std::unique_ptr<BlockDevice> NewEncryptedDevice(BlockDevice* inner, std::shared_ptr<const CacheKey> key,
                                                uint64_t data_offset) {
  return std::make_unique<EncryptedDevice>(inner, std::move(key), data_offset);
}

}  // namespace cachecore
