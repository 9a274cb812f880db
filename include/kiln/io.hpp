#pragma once
// kiln's files, opt in (kiln/kiln.hpp does not include them: they would cost every translation unit about a second
// of compile time): traced functions saved and loaded (kiln::save, kiln::load), checkpoints (kiln::save_checkpoint,
// kiln::load_checkpoint), safetensors (kiln::save_safetensors, kiln::load_safetensors) and ONNX export and import
// (kiln::export_onnx, kiln::load_onnx). docs/deployment.md and docs/file-format.md describe them.
#include "kiln.hpp"
#include "io/checkpoint.hpp"
#include "io/function_file.hpp"
#include "io/onnx.hpp"
#include "io/safetensors.hpp"
#include "io/separate.hpp"
