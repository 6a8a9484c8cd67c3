#include "paths.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace cachectl {

using cachecore::Result;
using cachecore::Status;

Dirs ResolveDirs(const std::string& run_flag, const std::string& state_flag) {
  auto pick = [](const std::string& flag, const char* env, const char* fallback) {
    if (!flag.empty()) return flag;
    const char* v = std::getenv(env);
    return std::string(v && *v ? v : fallback);
  };
  return {pick(run_flag, "CACHECTL_RUN_DIR", "/run/cachectl"),
          pick(state_flag, "CACHECTL_STATE_DIR", "/var/lib/cachectl")};
}

Status CheckName(const std::string& name) {
  // Not starting with '-' either: the name is an argument of other commands.
  bool ok = !name.empty() && name.size() <= 64 && name[0] != '.' && name[0] != '-' &&
            std::all_of(name.begin(), name.end(), [](char c) {
              return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
            });
  if (ok) return Status::Ok();
  return Status::InvalidArgument("'" + name + "' is not a valid cache name (1-64 letters, digits, "
                                 "'.', '_', '-'; not starting with '.' or '-')");
}

std::string NameFromPath(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  std::string name;
  for (char c : base) {
    bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    name += keep ? c : '-';
  }
  while (!name.empty() && name[0] == '.') name.erase(0, 1);
  return name.substr(0, 64);
}

Status SaveConfig(const std::string& path, const CacheConfig& config) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [k, v] : config) out << k << "=" << v << "\n";
    out.flush();
    if (!out) return Status::IoError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IoError("cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<CacheConfig> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  CacheConfig config;
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) return Status::Corruption(path + ": malformed line '" + line + "'");
    config[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return config;
}

Result<std::vector<ListedVolume>> LoadListedVolumes(const Dirs& dirs, const std::string& cache) {
  std::vector<ListedVolume> volumes;
  Result<CacheConfig> listed = LoadConfig(dirs.VolumesFile(cache));
  if (!listed.ok()) {
    if (listed.status().code() == cachecore::StatusCode::kNotFound) return volumes;  // none added
    return listed.status();
  }
  for (const auto& [key, value] : listed.value()) {
    if (key.find(':') == std::string::npos) volumes.push_back({key, value, "", ""});
  }
  for (ListedVolume& v : volumes) {
    const CacheConfig& c = listed.value();
    if (auto it = c.find(v.name + ":online"); it != c.end()) v.online_volume = it->second;
    if (auto it = c.find(v.name + ":table"); it != c.end()) v.online_table = it->second;
    if (v.online_volume.empty() != v.online_table.empty()) {
      return Status::Corruption(dirs.VolumesFile(cache) + ": volume " + v.name + " lacks its online table or name");
    }
  }
  return volumes;
}

Status SaveListedVolumes(const Dirs& dirs, const std::string& cache, const std::vector<ListedVolume>& volumes) {
  CacheConfig listed;
  for (const ListedVolume& v : volumes) {
    listed[v.name] = v.origin;
    if (v.online_volume.empty()) continue;
    listed[v.name + ":online"] = v.online_volume;
    listed[v.name + ":table"] = v.online_table;
  }
  return SaveConfig(dirs.VolumesFile(cache), listed);
}

// '+' is in no cache name, so no cache's hidden device is another's volume's.
std::string HiddenOriginName(const std::string& cache, const std::string& volume) {
  return "cachectl-origin-" + cache + (volume.empty() ? "" : "+" + volume);
}

std::vector<std::string> ListCaches(const Dirs& dirs) {
  std::vector<std::string> names;
  DIR* d = opendir(dirs.state.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    struct stat st {};
    if (n[0] != '.' && stat(dirs.ConfigFile(n).c_str(), &st) == 0) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Status MakeDirs(const std::string& path, unsigned mode) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string part = path.substr(0, pos);
    if (mkdir(part.c_str(), mode) != 0 && errno != EEXIST) {
      return Status::IoError("cannot create " + part + ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

}  // namespace cachectl
