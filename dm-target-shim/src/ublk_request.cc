#include "ublk_request.h"

#include <cerrno>

namespace shim {

// The driver sets op_flags to the UBLK_IO_OP_* in the low byte ORed with the
// UBLK_IO_F_* flags (ublk_setup_iod), each constant already at its bit in
// op_flags. Not ublksrv_get_flags(): it shifts op_flags right by 8, and a
// UBLK_IO_F_* tested against that is a bit the driver never sets.
UblkRequest DecodeUblkRequest(const ublksrv_io_desc& desc) {
  UblkRequest r;
  r.op = ublksrv_get_op(&desc);
  r.fua = (desc.op_flags & UBLK_IO_F_FUA) != 0;
  r.offset = desc.start_sector << 9;
  r.length = uint64_t{desc.nr_sectors} << 9;
  return r;
}

void UblkRequestRun::Start(BlockBackend& backend, const ublksrv_io_desc& desc, uint8_t* buf) {
  backend_ = &backend;
  request_ = DecodeUblkRequest(desc);
  zeroed_ = 0;
  const UblkRequest& r = request_;
  switch (r.op) {
    case UBLK_IO_OP_READ: return backend.ReadAsync(r.offset, buf, r.length, this);
    case UBLK_IO_OP_WRITE: return backend.WriteAsync(r.offset, buf, r.length, r.fua, this);
    case UBLK_IO_OP_FLUSH: return backend.FlushAsync(this);
    case UBLK_IO_OP_DISCARD: return backend.TrimAsync(r.offset, r.length, this);
    case UBLK_IO_OP_WRITE_ZEROES:
      if (r.length == 0) return Finished(0);
      return WriteNextZeroChunk(backend, r.offset, r.length, r.fua, &zeroed_, this);
    default: return Finished(-EOPNOTSUPP);
  }
}

void UblkRequestRun::Done(Status status) {
  const UblkRequest& r = request_;
  if (!status.ok()) return Finished(-ErrnoOf(status));
  if (r.op == UBLK_IO_OP_WRITE_ZEROES && zeroed_ < r.length) {
    // An engine answers writes on its record committer's thread, where a
    // next chunk goes to the engine's own reactor: chunks do not nest; a
    // backend that answers at once nests one frame per MiB of the range.
    return WriteNextZeroChunk(*backend_, r.offset, r.length, r.fua, &zeroed_, this);
  }
  bool moves_data = r.op == UBLK_IO_OP_READ || r.op == UBLK_IO_OP_WRITE;
  Finished(moves_data ? static_cast<int32_t>(r.length) : 0);
}

}  // namespace shim
