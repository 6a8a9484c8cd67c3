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

int32_t RunUblkRequest(BlockBackend& backend, const ublksrv_io_desc& desc, uint8_t* buf) {
  UblkRequest r = DecodeUblkRequest(desc);
  // The driver takes a read's or write's result as the bytes done; for the
  // other operations it looks only at the sign. A negative errno becomes
  // the request's block status (ENOSPC, EOPNOTSUPP and EBUSY keep their
  // meaning; the kernel takes an errno it has no status for as EIO).
  auto done = [](const Status& s, uint64_t bytes) {
    return s.ok() ? static_cast<int32_t>(bytes) : -ErrnoOf(s);
  };
  switch (r.op) {
    case UBLK_IO_OP_READ: return done(backend.Read(r.offset, buf, r.length), r.length);
    case UBLK_IO_OP_WRITE: return done(backend.Write(r.offset, buf, r.length, r.fua), r.length);
    case UBLK_IO_OP_FLUSH: return done(backend.Flush(), 0);
    case UBLK_IO_OP_DISCARD: return done(backend.Trim(r.offset, r.length), 0);
    case UBLK_IO_OP_WRITE_ZEROES: return done(WriteZeroes(backend, r.offset, r.length, r.fua), 0);
    default: return -EOPNOTSUPP;
  }
}

}  // namespace shim
