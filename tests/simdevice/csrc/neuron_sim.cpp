// A simulated `neuron` device for testing the smoke suite without Trainium.
//
// Device memory is host memory, so every op can run through at::native::cpu_fallback; the fallback
// records each op as "executed on device" or "fell back to CPU" (per a configurable set), which is what
// torch_neuronx's op tracking reports on real hardware. Faults are injected here, at the kernel level,
// so the harness sees them exactly as it would see a misbehaving device.
//
// The Neuron runtime's rules live here too (see tests/simdevice/README.md for each rule's source): the
// NeuronCores are claimed exclusively at first device use (lock files in a runtime folder, released when the
// process exits), the device nodes are opened then (a refused open is a permission error), each new
// (op, shapes, dtypes) is compiled once with a persistent on-disk cache, listed ops fall back to the CPU with
// a warning, and float64 values are held at float32 precision. Python (neuron_sim_rules.py) works out the
// configuration from the environment; this file enforces it.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <thread>
#include <unordered_set>
#include <vector>

namespace neuron_sim {
namespace {

std::atomic<int> g_device_count{2};
std::atomic<int> g_current_device{0};
std::atomic<bool> g_wrong_matmul{false};
std::atomic<bool> g_hang_matmul{false};

std::mutex g_mutex;
std::set<std::string> g_fallback_set;  // ops reported as CPU fallback rather than executed on the device
std::vector<std::string> g_fallback_ops;
std::vector<std::string> g_executed_ops;

const std::set<std::string>& matmul_ops() {
  static const std::set<std::string> ops = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"};
  return ops;
}

// The device's speed (neuron_sim.configure_speed): nanoseconds per flop of a bfloat16 / float32 matmul; 0 is host speed.
std::atomic<double> g_ns_per_flop_bf16{0.0};
std::atomic<double> g_ns_per_flop_fp32{0.0};
// NEURON_SIM_INJECT=slow_device: square bfloat16 matmuls up to this size run g_slow_factor times slower.
std::atomic<double> g_slow_factor{1.0};
std::atomic<int64_t> g_slow_max_dim{0};

// 2K of a matmul op on the stack before the call (K: the inner dimension); times the output's elements, its flops.
double twice_inner_dim(const std::string& name, const torch::jit::Stack& stack, size_t nargs) {
  const size_t mat1 = stack.size() - nargs + ((name == "aten::addmm" || name == "aten::baddbmm") ? 1 : 0);
  if (mat1 >= stack.size() || !stack[mat1].isTensor()) {
    return 0.0;
  }
  return 2.0 * static_cast<double>(stack[mat1].toTensor().size(-1));
}

// A matmul returns no sooner than its flops at the configured speed allow: a device runs at its own speed.
void pace(double two_k, const torch::jit::Stack& stack, std::chrono::steady_clock::time_point start) {
  for (const auto& value : stack) {
    if (!value.isTensor()) {
      continue;
    }
    const auto& out = value.toTensor();
    const auto type = out.scalar_type();
    double ns = type == at::kBFloat16 ? g_ns_per_flop_bf16.load() : type == at::kFloat ? g_ns_per_flop_fp32.load() : 0.0;
    const auto k = static_cast<int64_t>(two_k / 2);
    if (type == at::kBFloat16 && out.dim() == 2 && out.size(0) == k && out.size(1) == k && k <= g_slow_max_dim.load()) {
      ns *= g_slow_factor.load();
    }
    if (ns > 0.0 && two_k > 0.0) {
      std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(two_k * out.numel() * ns)));
    }
    return;
  }
}

void configure_speed(double bf16_tflops, double fp32_tflops, double slow_factor, int64_t slow_max_dim) {
  g_ns_per_flop_bf16 = bf16_tflops > 0.0 ? 1e-3 / bf16_tflops : 0.0;
  g_ns_per_flop_fp32 = fp32_tflops > 0.0 ? 1e-3 / fp32_tflops : 0.0;
  g_slow_factor = slow_factor;
  g_slow_max_dim = slow_max_dim;
}

at::Tensor as_cpu_view(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// ---- Runtime rules (configured by neuron_sim_rules.py) ----

struct RuntimeConfig {
  bool enforce = false;                    // claim cores and open device nodes at first use
  std::vector<std::string> nodes;          // device nodes this process's visible cores live on
  std::vector<std::string> core_locks;     // one lock file per physical core the visible cores cover
  std::vector<std::string> core_labels;    // "nc<i>" per visible logical core, for NRT's message
  std::string init_error;                  // a configuration error NRT reports at nrt_init
  bool compile_cache = false;              // first-use compile latency with the on-disk cache
  std::string cache_dir;
  int64_t compile_us = 0;
  int64_t load_us = 0;
  bool warn_fallback = false;
  bool float64_as_float32 = false;
};

std::mutex g_rt_mutex;
RuntimeConfig g_rt;
std::atomic<pid_t> g_rt_pid{0};  // the process that initialised the runtime; a forked child has not
std::vector<int> g_rt_fds;

std::mutex g_compile_mutex;
std::unordered_set<std::string> g_compiled;  // op signatures loaded in this process
std::atomic<int64_t> g_cache_misses{0};
std::atomic<int64_t> g_cache_hits{0};
std::unordered_set<std::string> g_warned_fallback;
std::atomic<bool> g_warned_float64{false};

std::string read_holder(const std::string& path) {
  std::ifstream in(path);
  std::string pid;
  std::getline(in, pid);
  return pid.empty() ? "unknown" : pid;
}

void release_fds(std::vector<int>& fds) {
  for (int fd : fds) {
    ::close(fd);
  }
  fds.clear();
}

// nrt_init: open the device nodes and take every core exclusively, or fail as NRT does.
void runtime_init_locked() {
  const RuntimeConfig& cfg = g_rt;
  TORCH_CHECK(cfg.init_error.empty(), cfg.init_error);
  std::vector<int> fds;
  for (const auto& node : cfg.nodes) {
    int fd = ::open(node.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      release_fds(fds);
      TORCH_CHECK(false, "NRT:nrt_init failed to open Neuron device ", node, ": ", std::strerror(err),
                  (err == EACCES || err == EPERM) ? " (permission denied: the device node exists but this user may "
                                                    "not open it)"
                                                  : "");
    }
    fds.push_back(fd);
  }
  for (const auto& lock : cfg.core_locks) {
    int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    TORCH_CHECK(fd >= 0, "neuron_sim: cannot create the core lock ", lock, ": ", std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      std::string holder = read_holder(lock);
      ::close(fd);
      release_fds(fds);
      std::ostringstream requested;
      requested << cfg.core_labels.front();
      if (cfg.core_labels.size() > 1) {
        requested << "-" << cfg.core_labels.back();
      }
      TORCH_CHECK(false, "NRT:nrt_allocate_neuron_cores NeuronCore(s) not available - Requested:", requested.str(),
                  " Available:0. The cores are held by process pid ", holder,
                  " (NeuronCores belong to one process; restrict each process with NEURON_RT_VISIBLE_CORES)");
    }
    std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
      // The lock itself is what counts; the pid is only for the message.
    }
    fds.push_back(fd);
  }
  release_fds(g_rt_fds);
  g_rt_fds = std::move(fds);
}

void ensure_runtime() {
  const pid_t me = ::getpid();
  if (g_rt_pid.load() == me) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_rt_mutex);
  if (g_rt_pid.load() == me) {
    return;
  }
  if (g_rt.enforce) {
    runtime_init_locked();
  }
  g_rt_pid = me;
}

std::string signature(const std::string& name, const torch::jit::Stack& stack, size_t nargs) {
  std::ostringstream key;
  key << name;
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      key << "|" << c10::toString(t.scalar_type()) << t.sizes();
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorList()) {
        key << "|" << c10::toString(static_cast<at::Tensor>(t).scalar_type()) << static_cast<at::Tensor>(t).sizes();
      }
    }
  }
  return key.str();
}

// Where the NEFF cache keeps an entry, in TorchNeuron's layout (pre-release PersistentCacheBackend.cpp,
// GetShardedPath): <dir>/<k[0:2]>/<k[2:4]>/<k>.neff for a 32-hex-digit key hashed from the kernel's key and IR. Eager
// kernels and torch.compile graphs share that one namespace: nothing in a file's name or place says which it is
// (site/torch_neuronx/_compile.py stores graphs the same way).
std::string neff_path(const std::string& key) {
  std::ostringstream hex;
  hex << std::hex << std::setfill('0') << std::setw(16) << std::hash<std::string>{}(key) << std::setw(16)
      << std::hash<std::string>{}(key + "\n");
  const std::string k = hex.str();
  return g_rt.cache_dir + "/" + k.substr(0, 2) + "/" + k.substr(2, 2) + "/" + k + ".neff";
}

// Eager mode compiles each new (op, shapes, dtypes) on first use and keeps the result in the NEFF cache.
void compile_on_first_use(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(g_compile_mutex);
    if (!g_rt.compile_cache || g_compiled.count(key)) {
      return;
    }
    g_compiled.insert(key);
  }
  const std::string path = g_rt.cache_dir.empty() ? std::string() : neff_path(key);
  if (!g_rt.cache_dir.empty() && ::access(path.c_str(), R_OK) == 0) {
    g_cache_hits++;
    std::this_thread::sleep_for(std::chrono::microseconds(g_rt.load_us));
    return;
  }
  g_cache_misses++;
  std::this_thread::sleep_for(std::chrono::microseconds(g_rt.compile_us));
  if (!g_rt.cache_dir.empty()) {
    std::error_code ignored;  // no folder: the write below fails and a later process compiles again
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
    const std::string tmp = path + ".tmp" + std::to_string(::getpid());
    std::ofstream(tmp) << key << "\n";
    std::rename(tmp.c_str(), path.c_str());
  }
}

void warn_fallback(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_compile_mutex);
  if (g_rt.warn_fallback && g_warned_fallback.insert(name).second) {
    TORCH_WARN("[Neuron] [WARNING] Operator '", name, "' fell back to CPU");
  }
}

// float64 is not native: values are held at float32 precision (cast down and back).
void hold_float64_at_float32(const at::Tensor& t) {
  if (!g_rt.float64_as_float32 || t.scalar_type() != at::kDouble || !t.defined()) {
    return;
  }
  if (!g_warned_float64.exchange(true)) {
    TORCH_WARN("[Neuron] [WARNING] float64 is not supported on Neuron: computing in float32, precision may be lost");
  }
  at::Tensor host = t.is_cpu() ? t : as_cpu_view(t);
  host.copy_(host.to(at::kFloat));
}

c10::DeviceIndex current_index() {
  return static_cast<c10::DeviceIndex>(g_current_device.load());
}

void sim_free(void* ptr) {
  std::free(ptr);
}

struct SimAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    ensure_runtime();
    // malloc(0) may return nullptr; allocate one byte so every storage has a distinct, valid pointer.
    void* data = std::malloc(nbytes == 0 ? 1 : nbytes);
    TORCH_CHECK(data != nullptr, "neuron_sim: out of memory allocating ", nbytes, " bytes");
    return {data, data, &sim_free, c10::Device(c10::DeviceType::PrivateUse1, current_index())};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &sim_free;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

SimAllocator g_allocator;

struct SimGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return c10::DeviceType::PrivateUse1;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return {c10::DeviceType::PrivateUse1, current_index()};
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() < g_device_count.load(), "neuron_sim: invalid device index ", int(d.index()));
    if (d.index() >= 0) {
      g_current_device = d.index();
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) {
      g_current_device = d.index();
    }
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return s;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void synchronizeStream(const c10::Stream&) const override {}
  bool queryStream(const c10::Stream&) const override {
    return true;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuardImpl);

struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return g_device_count.load() > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return true;
  }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    g_current_device = d;
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_index();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = current_index();
    g_current_device = d;
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return {c10::DeviceType::PrivateUse1, current_index()};
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    // Random numbers come from the CPU generator; the harness creates inputs on the CPU and copies them.
    static at::Generator gen = at::detail::getDefaultCPUGenerator();
    return gen;
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    auto fresh = g_allocator.allocate(newsize);
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep > 0 && impl->data() != nullptr) {
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

SimHooks g_hooks;

// Registered at load time so torch.accelerator sees the device as soon as the library is loaded.
struct Registrar {
  Registrar() {
    at::RegisterPrivateUse1HooksInterface(&g_hooks);
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator);
  }
};
Registrar g_registrar;

at::Tensor as_cpu(const at::Tensor& t) {
  return as_cpu_view(t);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(c10::device_or_default(device));
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(size, &g_allocator, keys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const c10::DeviceGuard guard(c10::device_or_default(device));
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, keys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, storage_offset);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<at::MemoryFormat> fmt) {
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), fmt);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  ensure_runtime();
  at::Tensor dst_cpu = dst.is_cpu() ? dst : as_cpu(dst);
  at::Tensor src_cpu = self.is_cpu() ? self : as_cpu(self);
  dst_cpu.copy_(src_cpu, non_blocking);
  if (!dst.is_cpu()) {
    hold_float64_at_float32(dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::native::_local_scalar_dense_cpu(as_cpu(self));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage storage, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  return at::cpu::set_(self, storage, offset, size, stride);
}

// True when the op falls back to the CPU.
bool record(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_fallback_set.count(name)) {
    g_fallback_ops.push_back(name);
    return true;
  }
  g_executed_ops.push_back(name);
  return false;
}

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op.schema().operator_name().name;
  const bool is_matmul = matmul_ops().count(name) > 0;
  if (is_matmul && g_hang_matmul.load()) {
    // Sleeps in C++ (the GIL is released by the Python binding), like a device call that never completes.
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  ensure_runtime();
  if (record(name)) {
    warn_fallback(name);
  } else {
    compile_on_first_use(signature(name, *stack, op.schema().arguments().size()));
  }
  const double two_k = is_matmul ? twice_inner_dim(name, *stack, op.schema().arguments().size()) : 0.0;
  const auto start = std::chrono::steady_clock::now();
  at::native::cpu_fallback(op, stack);
  if (is_matmul) {
    pace(two_k, *stack, start);
  }
  for (const auto& value : *stack) {
    if (value.isTensor()) {
      if (is_matmul && g_wrong_matmul.load()) {
        value.toTensor().mul_(1.1);
      }
      hold_float64_at_float32(value.toTensor());
    }
  }
}

// Convolutions on PrivateUse1 dispatch to convolution_overrideable and convolution_backward_overrideable, which have
// no CPU kernel for the boxed fallback to call. These two run the CPU convolution on host memory, after the same
// accounting as every other op (runtime claimed, recorded as executed or fallen back, compiled on first use).
void account(const std::string& name, std::initializer_list<at::Tensor> tensors) {
  ensure_runtime();
  if (record(name)) {
    warn_fallback(name);
    return;
  }
  std::ostringstream key;
  key << name;
  for (const auto& t : tensors) {
    if (t.defined()) {
      key << "|" << c10::toString(t.scalar_type()) << t.sizes();
    }
  }
  compile_on_first_use(key.str());
}

at::Tensor host(const at::Tensor& t) {
  return t.defined() && !t.is_cpu() ? as_cpu_view(t) : t;
}

at::Tensor to_device(const at::Tensor& result, const at::Tensor& like) {
  if (!result.defined()) {
    return result;
  }
  at::Tensor out = at::empty(result.sizes(), like.options().dtype(result.scalar_type()));
  as_cpu_view(out).copy_(result);
  hold_float64_at_float32(out);
  return out;
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  const bool has_bias = bias.has_value() && bias->defined();
  account("aten::convolution_overrideable", {input, weight, has_bias ? *bias : at::Tensor()});
  std::optional<at::Tensor> host_bias = has_bias ? std::optional<at::Tensor>(host(*bias)) : std::nullopt;
  at::Tensor out = at::convolution(host(input), host(weight), host_bias, stride, padding, dilation, transposed,
                                   output_padding, groups);
  return to_device(out, input);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  account("aten::convolution_backward_overrideable", {grad_output, input, weight});
  // The bias has out_channels elements: weight dim 0, or dim 1 times groups when transposed.
  std::vector<int64_t> bias_sizes = {transposed ? weight.size(1) * groups : weight.size(0)};
  auto grads = at::convolution_backward(host(grad_output), host(input), host(weight),
                                        output_mask[2] ? std::optional<at::IntArrayRef>(bias_sizes) : std::nullopt,
                                        stride, padding, dilation, transposed, output_padding, groups, output_mask);
  return {to_device(std::get<0>(grads), input), to_device(std::get<1>(grads), weight),
          to_device(std::get<2>(grads), weight)};
}

// Control surface for the fake torch_neuronx module; tensor-free ops need no pybind11 module.
std::vector<std::string> get_fallback_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_fallback_ops;
}

std::vector<std::string> get_executed_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_executed_ops;
}

void clear_op_tracking() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fallback_ops.clear();
  g_executed_ops.clear();
}

void set_fallback_set(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fallback_set = std::set<std::string>(names.begin(), names.end());
}

int64_t device_count() {
  return g_device_count.load();
}

void configure_runtime(bool enforce, std::vector<std::string> nodes, std::vector<std::string> core_locks,
                       std::vector<std::string> core_labels, std::string init_error) {
  std::lock_guard<std::mutex> lock(g_rt_mutex);
  TORCH_CHECK(g_rt_pid.load() != ::getpid(), "neuron_sim: the runtime is already initialised in this process");
  g_rt.enforce = enforce;
  g_rt.nodes = std::move(nodes);
  g_rt.core_locks = std::move(core_locks);
  g_rt.core_labels = std::move(core_labels);
  g_rt.init_error = std::move(init_error);
}

void configure_compile(bool cache, std::string cache_dir, int64_t compile_us, int64_t load_us, bool warn_fallback,
                       bool float64_as_float32) {
  std::lock_guard<std::mutex> lock(g_compile_mutex);
  g_rt.compile_cache = cache;
  g_rt.cache_dir = std::move(cache_dir);
  g_rt.compile_us = compile_us;
  g_rt.load_us = load_us;
  g_rt.warn_fallback = warn_fallback;
  g_rt.float64_as_float32 = float64_as_float32;
}

std::vector<int64_t> compile_stats() {
  return {g_cache_misses.load(), g_cache_hits.load()};
}

bool runtime_initialized() {
  return g_rt_pid.load() == ::getpid();
}

void configure(int64_t device_count, bool wrong_matmul, bool hang_matmul) {
  g_device_count = static_cast<int>(device_count);
  g_wrong_matmul = wrong_matmul;
  g_hang_matmul = hang_matmul;
}

}  // namespace

TORCH_LIBRARY(neuron_sim, m) {
  m.def("get_fallback_ops() -> str[]", &get_fallback_ops);
  m.def("get_executed_ops() -> str[]", &get_executed_ops);
  m.def("clear_op_tracking() -> ()", &clear_op_tracking);
  m.def("set_fallback_set(str[] names) -> ()", &set_fallback_set);
  m.def("device_count() -> int", &device_count);
  m.def("configure(int device_count, bool wrong_matmul, bool hang_matmul) -> ()", &configure);
  m.def(
      "configure_runtime(bool enforce, str[] nodes, str[] core_locks, str[] core_labels, str init_error) -> ()",
      &configure_runtime);
  m.def(
      "configure_compile(bool cache, str cache_dir, int compile_us, int load_us, bool warn_fallback, "
      "bool float64_as_float32) -> ()",
      &configure_compile);
  m.def("compile_stats() -> int[]", &compile_stats);
  m.def("configure_speed(float bf16_tflops, float fp32_tflops, float slow_factor, int slow_max_dim) -> ()",
        &configure_speed);
  m.def("runtime_initialized() -> bool", &runtime_initialized);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("resize_", resize_);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("view", view);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
}

}  // namespace neuron_sim
