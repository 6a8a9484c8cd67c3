// --policy and --promote-after, as `cachectl replay` and `cachectl advise`
// take them: which eviction policy a run simulates.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "cachecore/policy/eviction_policy.h"

namespace cachectl {

class PolicyOptions {
 public:
  // Adds both options to `desc`.
  void Describe(boost::program_options::options_description& desc);
  // 0 with the choice in `kind` and `promote_after`; otherwise prints
  // "VERB: why" (an unknown name lists the known ones) and returns the
  // usage exit code.
  int Take(const std::string& verb, cachecore::PolicyKind* kind, uint32_t* promote_after) const;

 private:
  std::string name_ = "adaptive";
  std::string promote_after_;  // s3fifo's: "0", "1" or "2"; empty when not given (1, T2)
};

}  // namespace cachectl
