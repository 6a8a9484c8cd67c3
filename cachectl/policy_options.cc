#include "policy_options.h"

#include "commands.h"

namespace cachectl {

namespace po = boost::program_options;

void PolicyOptions::Describe(po::options_description& desc) {
  desc.add_options()
      ("policy", po::value(&name_),
       "eviction policy: s3fifo (the default, as a cache runs), lru, arc or wtinylfu (to compare)")
      ("promote-after", po::value(&promote_after_),
       "s3fifo: hits in the small queue before main, more than N (default 1: T2; 0: T1)");
}

int PolicyOptions::Take(const std::string& verb, cachecore::PolicyKind* kind, uint32_t* promote_after) const {
  cachecore::Result<cachecore::PolicyKind> parsed = cachecore::ParsePolicyName(name_);
  if (!parsed.ok()) return Fail(kExitUsage, verb + ": --policy: " + parsed.status().message());
  // S3-FIFO's frequency stops at 3: more than 2 hits would never promote.
  if (promote_after_ > 2) return Fail(kExitUsage, verb + ": --promote-after must be 0, 1 or 2");
  *kind = parsed.value();
  *promote_after = promote_after_;
  return 0;
}

}  // namespace cachectl
