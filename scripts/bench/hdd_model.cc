#include "hdd_model.h"

#include <cmath>

namespace bench {

HddModel::HddModel(uint64_t volume_bytes, const HddParams& params)
    : volume_bytes_(volume_bytes ? volume_bytes : 1), params_(params) {
  // Seek time grows with the square root of the distance (the arm
  // accelerates, then brakes); the average random seek covers a third of
  // the stroke.
  full_stroke_s_ = params_.track_to_track_s +
                   (params_.average_seek_s - params_.track_to_track_s) / std::sqrt(1.0 / 3.0);
  track_bytes_ = static_cast<uint64_t>(params_.media_bytes_per_s * rotation_s());
}

double HddModel::SeekTime(uint64_t distance) const {
  if (distance < track_bytes_) return 0;  // the same track
  double fraction = static_cast<double>(distance) / static_cast<double>(volume_bytes_);
  return params_.track_to_track_s +
         (full_stroke_s_ - params_.track_to_track_s) * std::sqrt(std::min(fraction, 1.0));
}

double HddModel::PositioningTime(uint64_t offset, double now) const {
  if (offset == head_) return 0;  // streaming on: the next sector is under the head
  uint64_t distance = offset > head_ ? offset - head_ : head_ - offset;
  double seek = SeekTime(distance);
  // Where the platter is when the head arrives, and where the sector is.
  double turns = (now + seek) / rotation_s();
  double angle = turns - std::floor(turns);
  double target = static_cast<double>(offset % track_bytes_) / static_cast<double>(track_bytes_);
  double wait = target - angle;
  if (wait < 0) wait += 1;
  return seek + wait * rotation_s();
}

double HddModel::ServiceTime(uint64_t offset, uint64_t length, double now) const {
  return PositioningTime(offset, now) + static_cast<double>(length) / params_.media_bytes_per_s;
}

}  // namespace bench
