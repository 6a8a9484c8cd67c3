// HddModel: the service time of a 7,200 rpm disk with one actuator, for the
// emulated disk of the benchmarks (cachectl-hdd-emu). Deterministic: the
// platter turns with the clock the caller passes in.
//
// Defaults: a 3.5-inch 7,200 rpm NAS disk of 8 TB like the QNAP review's:
// 210 MB/s sustained (Seagate IronWolf 8 TB, ST8000VN004, datasheet); seek
// 1.0 ms track to track and 8.5 ms on average (typical of such drives; the
// datasheet gives none); no write cache (every write reaches the platter).
// The emulated volume spans the whole stroke: a seek across it is a
// full-stroke seek.
#pragma once

#include <cstdint>

namespace bench {

struct HddParams {
  double rpm = 7200;
  double media_bytes_per_s = 210e6;
  double track_to_track_s = 1.0e-3;
  double average_seek_s = 8.5e-3;  // over a third of the stroke, as drives quote it
};

class HddModel {
 public:
  HddModel(uint64_t volume_bytes, const HddParams& params = {});

  // Seconds to move the head from where it is to `offset` and wait for the
  // sector to come round, starting at time `now` (seconds).
  double PositioningTime(uint64_t offset, double now) const;
  // Positioning, then transferring `length` bytes.
  double ServiceTime(uint64_t offset, uint64_t length, double now) const;
  // The request was served: the head ends after it.
  void Served(uint64_t offset, uint64_t length) { head_ = offset + length; }

  double SeekTime(uint64_t distance) const;
  double rotation_s() const { return 60.0 / params_.rpm; }
  uint64_t track_bytes() const { return track_bytes_; }

 private:
  uint64_t volume_bytes_;
  HddParams params_;
  double full_stroke_s_;
  uint64_t track_bytes_;
  uint64_t head_ = 0;
};

}  // namespace bench
