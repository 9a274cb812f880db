#pragma once
// ONNX in and out: kiln::export_onnx (io/onnx_export.hpp) and kiln::load_onnx (io/onnx_import.hpp).
#include "onnx_export.hpp"
#include "onnx_import.hpp"
