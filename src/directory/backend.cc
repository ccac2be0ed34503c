// Which backend a directory URL names, and the one that stands in for a
// server whose client library this build was made without.
#include "directory/backend.h"

namespace ferry::directory {
namespace {

class MissingBackend final : public Backend {
 public:
  MissingBackend(const std::string& server, const std::string& library)
      : why_(Code::kUnimplemented,
             "this ferry was built without a " + server + " client: install " + library + " and rebuild") {}

  Result<std::optional<std::string>> get(const std::string&, size_t, Deadline) override { return why_; }
  Status list(const std::string&, size_t, size_t, Deadline, const TakeEntry&) override { return why_; }
  Status put_with_ttl(const std::string&, const std::string&, std::chrono::milliseconds, Deadline) override {
    return why_;
  }
  Result<bool> refresh(const std::string&, const std::string&, std::chrono::milliseconds, Deadline) override {
    return why_;
  }
  Status remove_if(const std::string&, const std::string&, Deadline) override { return why_; }
  Status put(const std::string&, const std::string&, Deadline) override { return why_; }

 private:
  const Status why_;
};

}  // namespace

std::unique_ptr<Backend> make_missing_backend(const std::string& server, const std::string& library) {
  return std::make_unique<MissingBackend>(server, library);
}

std::unique_ptr<Backend> make_backend(const DirectoryUrl& url) {
  if (url.scheme == DirectoryUrl::Scheme::kRedis) return make_redis_backend(url);
  return make_etcd_backend(url);
}

}  // namespace ferry::directory
