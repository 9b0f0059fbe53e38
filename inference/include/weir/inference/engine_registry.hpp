// The engines of one program, one per model file: every caller that asks the same registry for
// a model by path gets the same Engine (and so the same weights, KV cache and batches); the
// file is loaded on first use only, even when many callers ask at once.
//
// Ownership: a program's composition root (a weir command, the server, a worker, a sample) owns
// one registry and passes it down to whatever opens models (agents::LocalChatModel::open,
// agents::WorkflowServices::engines). There is no process-wide registry. Destroying the
// registry drops its references: each engine then lives on exactly as long as the last holder
// of its shared_ptr (a LocalChatModel, an agent), and is stopped and freed with it.
// REQUIRES: a MemoryBudget an engine reserves its KV pool from (EngineConfig::budget) outlives
// the registry and every holder of that engine; declare the budget before the registry.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>

#include "weir/inference/engine.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {

class EngineRegistry {
 public:
  using Factory = std::function<Result<std::unique_ptr<Engine>>(std::shared_ptr<const Model>)>;

  EngineRegistry();
  ~EngineRegistry();
  EngineRegistry(const EngineRegistry&) = delete;
  EngineRegistry& operator=(const EngineRegistry&) = delete;

  // The engine for `path` (compared by canonical path). On first use the model is loaded and
  // `make` builds its engine with the settings it chooses; later callers get that engine
  // whatever their own settings. Errors (the load's, make's) are returned and nothing is
  // kept, so a later call can retry.
  Result<std::shared_ptr<Engine>> get(const std::filesystem::path& path, const Factory& make);
  std::size_t loads() const;  // model files loaded so far
  std::size_t size() const;   // engines held

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weir::inference
