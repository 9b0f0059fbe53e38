#include "weir/inference/engine_registry.hpp"

namespace weir::inference {

EngineRegistry& EngineRegistry::global() {
  static EngineRegistry* r = new EngineRegistry();  // engines live until the process ends
  return *r;
}

namespace {
std::filesystem::path key_of(const std::filesystem::path& p) {
  std::error_code ec;
  auto c = std::filesystem::canonical(p, ec);
  return ec ? std::filesystem::absolute(p).lexically_normal() : c;
}
}  // namespace

Result<std::shared_ptr<Engine>> EngineRegistry::get(const std::filesystem::path& path,
                                                    const Factory& make) {
  const auto key = key_of(path);
  std::lock_guard lock(mu_);  // held while loading: concurrent first callers wait, load once
  if (auto it = engines_.find(key); it != engines_.end()) return it->second;
  auto model = Model::load(key);
  if (!model) return std::move(model).error();
  ++loads_;
  auto engine = make(*model);
  if (!engine) return std::move(engine).error();
  std::shared_ptr<Engine> shared(std::move(*engine));
  engines_.emplace(key, shared);
  return shared;
}

void EngineRegistry::release(const std::filesystem::path& path) {
  std::lock_guard lock(mu_);
  engines_.erase(key_of(path));
}

std::size_t EngineRegistry::loads() const {
  std::lock_guard lock(mu_);
  return loads_;
}

std::size_t EngineRegistry::size() const {
  std::lock_guard lock(mu_);
  return engines_.size();
}

}  // namespace weir::inference
