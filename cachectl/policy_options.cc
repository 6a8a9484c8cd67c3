#include "policy_options.h"

#include "commands.h"

namespace cachectl {

namespace po = boost::program_options;

void PolicyOptions::Describe(po::options_description& desc) {
  desc.add_options()
      ("policy", po::value(&name_),
       "eviction policy: adaptive (the default, as a cache runs), or to compare s3fifo, lru, arc or wtinylfu")
      ("promote-after", po::value(&promote_after_),
       "s3fifo only: hits in the small queue before main, more than N (default 1: T2; 0: T1)");
}

int PolicyOptions::Take(const std::string& verb, cachecore::PolicyKind* kind, uint32_t* promote_after) const {
  cachecore::Result<cachecore::PolicyKind> parsed = cachecore::ParsePolicyName(name_);
  if (!parsed.ok()) return Fail(kExitUsage, verb + ": --policy: " + parsed.status().message());
  if (!promote_after_.empty() && parsed.value() != cachecore::PolicyKind::kS3Fifo) {
    return Fail(kExitUsage, verb + ": --promote-after applies to --policy s3fifo only (the adaptive policy chooses its own)");
  }
  // S3-FIFO's frequency stops at 3: more than 2 hits would never promote.
  if (promote_after_.size() > 1 || (!promote_after_.empty() && (promote_after_[0] < '0' || promote_after_[0] > '2'))) {
    return Fail(kExitUsage, verb + ": --promote-after must be 0, 1 or 2");
  }
  *kind = parsed.value();
  *promote_after = promote_after_.empty() ? 1 : static_cast<uint32_t>(promote_after_[0] - '0');
  return 0;
}

}  // namespace cachectl
