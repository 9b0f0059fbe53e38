#include <new>
#include <thread>

#include "runner/llama_runner.hpp"
#include "weir/inference/runner.hpp"
#include "weir/runtime/log.hpp"

#if WEIR_HAVE_CUDA
#include "weir/inference/cuda/cuda_ops.hpp"
#include "weir/inference/cuda/cuda_runner.hpp"
#endif

namespace weir::inference {

Result<Device> parse_device(std::string_view name) {
  if (name == "auto") return Device::automatic;
  if (name == "cpu") return Device::cpu;
  if (name == "cuda" || name == "gpu") return Device::cuda;
  return Error(Errc::invalid_argument,
               "unknown device '" + std::string(name) + "' (choose auto, cpu or cuda)");
}

bool cuda_built() {
  return WEIR_HAVE_CUDA != 0;
}

namespace {
Result<RunnerChoice> choose_runner(std::shared_ptr<const Model> model, Device device,
                                   int cpu_threads) {
  if (cpu_threads <= 0)
    cpu_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if WEIR_HAVE_CUDA
  if (device != Device::cpu && cuda::available()) {
    const cuda::CudaRunnerOptions opt;  // BF16 weights and GEMMs, CUDA graphs for decode
    auto r = cuda::make_cuda_runner(model, opt);
    if (!r && device == Device::automatic && r.error().is(Errc::unsupported)) {
      // A GPU the backend cannot use (too old, no cuBLAS): auto means the CPU then.
      log(LogLevel::warn, "inference device: CUDA unusable, using the CPU: " + r.error().message);
    } else if (!r) {
      return std::move(r).error();
    } else {
      RunnerChoice c{
          std::move(*r), Device::cuda,
          "cuda (" + cuda::device_info().name + ", " + cuda::precision_name(opt.precision) + ")"};
      log(LogLevel::info, "inference device: " + c.description);
      return c;
    }
  } else if (device == Device::cuda) {
    return Error(Errc::unsupported,
                 "--device cuda was asked for, but no CUDA device is present; use --device cpu");
  }
#else
  if (device == Device::cuda) {
    return Error(Errc::unsupported,
                 "--device cuda was asked for, but this build of weir has no CUDA backend "
                 "(rebuild with WEIR_CUDA=ON where nvcc is installed); use --device cpu");
  }
#endif
  RunnerChoice c{
      make_llama_runner(std::move(model), cpu_threads), Device::cpu,
      "cpu (" + std::to_string(cpu_threads) + " thread" + (cpu_threads == 1 ? "" : "s") + ")"};
  log(LogLevel::info, "inference device: " + c.description);
  return c;
}
}  // namespace

Result<RunnerChoice> make_runner(std::shared_ptr<const Model> model, Device device,
                                 int cpu_threads) {
  // A runner's working buffers the machine has no room for: an error, not a terminate.
  try {
    return choose_runner(std::move(model), device, cpu_threads);
  } catch (const std::bad_alloc&) {
    return Error(Errc::memory_budget_exceeded,
                 "the model runner's working buffers could not be allocated: the machine does "
                 "not have the free memory for this model");
  }
}

}  // namespace weir::inference
