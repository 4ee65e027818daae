package main

import (
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// tfjsFloat32s returns the float32 weights of the TensorFlow.js model at
// name back to back in manifest order, or false when the model has
// quantized weights or weights other than float32 and int32 (shape
// constants).
func tfjsFloat32s(name string) ([]byte, bool, error) {
	m, err := tensorfile.OpenTFJSFile(name)
	if err != nil {
		return nil, false, err
	}
	ws := m.Weights()
	for _, w := range ws {
		if w.QuantDType != "" || (w.DType != codec.F32 && w.DType != codec.I32) {
			return nil, false, nil
		}
	}
	var out []byte
	for i, w := range ws {
		if w.DType != codec.F32 {
			continue
		}
		x, err := m.ReadIndex(i)
		if err != nil {
			return nil, false, err
		}
		out = append(out, x.Data...)
	}
	return out, len(out) > 0, nil
}

// onnxFP16 returns the float16 initializers of the ONNX model at path,
// back to back in file order.
func onnxFP16(path string) ([]byte, error) {
	m, err := tensorfile.OpenONNXFile(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var out []byte
	for i, info := range m.Tensors() {
		if info.DType != codec.F16 {
			continue
		}
		x, err := m.ReadIndex(i)
		if err != nil {
			return nil, err
		}
		out = append(out, x.Data...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no float16 initializer", path)
	}
	return aligned(out), nil
}
