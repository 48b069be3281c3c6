// Loads the AOTInductor package that tests/aoti/export_block.py compiled (an attention block calling
// attn::flash_attention, exported with a dynamic sequence length) and runs it in C++ at the lengths the script
// ran the eager block at, checking each output against the eager one. Exit 0 when all pass, 1 on a failed
// check, 2 on a usage error.
//
// The package does not contain the op: its generated code calls attn::flash_attention through the dispatcher
// (AOTInductor's proxy executor), so this program links libattn.so, whose TORCH_LIBRARY registers the op when
// it loads.

#include <attn/cpu_kernel_info.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstdlib>
#include <exception>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: attn_aoti_run_package --package FILE.pt2 --cases FILE.pt [--tolerance X]\n"
    "\n"
    "Runs an AOTInductor package made by tests/aoti/export_block.py and compares its outputs with the eager\n"
    "model's, which the script saved with torch.save.\n"
    "\n"
    "  --package FILE.pt2  the package (torch._inductor.aoti_compile_and_package)\n"
    "  --cases FILE.pt     torch.save of {\"lengths\": [T...], \"inputs\": [x...], \"outputs\": [y...],\n"
    "                      \"min_length\": the Dim's min, \"max_length\": its max}\n"
    "  --tolerance X       largest max abs error allowed at each length (default 1e-5)\n"
    "  --help              this text\n"
    "\n"
    "Exit status: 0 all checks pass, 1 a check fails, 2 a usage error.\n";

struct Arguments {
  std::string package;
  std::string cases;
  double tolerance = 1e-5;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "error: " << message << "\n\n" << kUsage;
  std::exit(2);
}

Arguments parse(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (flag != "--package" && flag != "--cases" && flag != "--tolerance") {
      usage_error("unknown argument '" + flag + "'");
    }
    if (i + 1 == argc) usage_error(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--package") {
      args.package = value;
    } else if (flag == "--cases") {
      args.cases = value;
    } else {
      char* end = nullptr;
      args.tolerance = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(args.tolerance >= 0)) {
        usage_error("--tolerance expects a number >= 0, got '" + value + "'");
      }
    }
  }
  if (args.package.empty() || args.cases.empty()) usage_error("--package and --cases are required");
  return args;
}

struct Cases {
  std::vector<int64_t> lengths;
  std::vector<torch::Tensor> inputs;
  std::vector<torch::Tensor> outputs;
  int64_t min_length = 0, max_length = 0;  // the exported Dim's range
};

Cases read_cases(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot open " + path + " (run tests/aoti/export_block.py first)");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto dict = torch::pickle_load(bytes).toGenericDict();
  Cases cases;
  for (const auto& length : dict.at("lengths").toListRef()) cases.lengths.push_back(length.toInt());
  for (const auto& input : dict.at("inputs").toListRef()) cases.inputs.push_back(input.toTensor());
  for (const auto& output : dict.at("outputs").toListRef()) cases.outputs.push_back(output.toTensor());
  cases.min_length = dict.at("min_length").toInt();
  cases.max_length = dict.at("max_length").toInt();
  if (cases.lengths.empty() || cases.inputs.size() != cases.lengths.size() ||
      cases.outputs.size() != cases.lengths.size()) {
    throw std::runtime_error(path + ": expected as many inputs and outputs as lengths, and at least one");
  }
  return cases;
}

std::string scientific(double value) {
  std::ostringstream out;
  out << std::scientific << std::setprecision(3) << value;
  return out.str();
}

bool report(bool ok, const std::string& what) {
  std::cout << (ok ? "ok   " : "FAIL ") << what << "\n";
  return ok;
}

int run(const Arguments& args) {
  // Without libattn.so in the process the package would only fail at its first call, inside the proxy
  // executor; say so up front instead.
  if (!c10::Dispatcher::singleton().findSchema({"attn::flash_attention", ""})) {
    std::cerr << "error: attn::flash_attention is not registered: this program must load libattn.so\n";
    return 1;
  }
  // Also what keeps libattn.so on the link line of a linker run with --as-needed: a symbol of it is used.
  std::cout << "torch " << TORCH_VERSION << ", attn CPU kernels: " << attn::cpu_kernel_info().summary << "\n";

  // The generated code then checks every input's dtype, sizes and strides against the exported program (the
  // Dim's bounds included), and the op's outputs against the sizes and strides its Meta kernel gave Inductor.
  // Without it a length outside the Dim runs unchecked, and the refusals below fail, so a caller's 0 is
  // overridden. Read once, at the package's first check.
  setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", /*overwrite=*/1);

  const Cases cases = read_cases(args.cases);
  if (!std::ifstream(args.package)) throw std::runtime_error("cannot open " + args.package);
  // Its proxy executor looks attn::flash_attention's schema up here: libattn.so must already be loaded.
  torch::inductor::AOTIModelPackageLoader loader(args.package);
  torch::NoGradGuard no_grad;

  bool good = true;
  for (size_t i = 0; i < cases.lengths.size(); ++i) {
    const std::string name = "T=" + std::to_string(cases.lengths[i]);
    const torch::Tensor& want = cases.outputs[i];
    const std::vector<torch::Tensor> got = loader.run({cases.inputs[i]});
    if (got.size() != 1 || got[0].sizes() != want.sizes() || got[0].scalar_type() != want.scalar_type()) {
      good &= report(false, name + ": " + std::to_string(got.size()) + " output(s), the first " +
                                (got.empty() ? std::string("missing") : c10::str(got[0].sizes(), " ",
                                                                                 got[0].scalar_type())) +
                                ", expected one " + c10::str(want.sizes(), " ", want.scalar_type()));
      continue;
    }
    // NaN compares false, so a non-finite output fails too.
    const double error = (got[0].to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
    good &= report(error <= args.tolerance, name + ": output " + c10::str(got[0].sizes()) + ", max abs error " +
                                                scientific(error) + " (tolerance " + scientific(args.tolerance) + ")");
  }

  // The package keeps the Dim's range: a length outside it, where the export proved nothing, is refused.
  std::cout << "(the package also prints each refusal below to stderr, as \"Error: ...\")" << std::endl;
  const auto& x = cases.inputs.front();
  for (const int64_t outside : {cases.min_length - 1, cases.max_length + 1}) {
    const std::string name = "T=" + std::to_string(outside) + " (outside the exported Dim's range) is refused";
    try {
      loader.run({torch::zeros({x.size(0), outside, x.size(2)}, x.options())});
      good &= report(false, name + ": the package ran it");
    } catch (const std::exception& e) {
      const std::string message = e.what();
      good &= report(true, name + ": " + message.substr(0, message.find('\n')));
    }
  }

  std::cout << (good ? "all passed" : "FAILURES") << "\n";
  return good ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments args = parse(argc, argv);
  try {
    return run(args);
  } catch (const c10::Error& e) {
    // LibTorch's errors carry a C++ backtrace that says nothing here (a missing or damaged package).
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
