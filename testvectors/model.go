package testvectors

import (
	"embed"
	"fmt"
	"path"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// The reference model: a 784-128-64-10 MLP trained by PyTorch on
// Fashion-MNIST for 3 epochs (84.0% test accuracy), made by
// reference/gen.py. Its weights and the gradients of one batch are real
// tensors made by a real framework, for the measurements that synthetic
// data cannot stand in for.
//
//go:embed reference/model/weights/*.npy reference/model/grads/*.npy
var model embed.FS

// ModelWeights returns the trained model's parameters, named like
// "fc1.weight", in the order fc1, fc2, fc3 (weight before bias).
func ModelWeights() ([]*codec.Tensor, error) { return loadModel("weights", "") }

// ModelGrads returns the gradients of one batch (the first 128 training
// images, after training), named like "fc1.weight.grad".
func ModelGrads() ([]*codec.Tensor, error) { return loadModel("grads", ".grad") }

func loadModel(dir, suffix string) ([]*codec.Tensor, error) {
	var ts []*codec.Tensor
	for _, layer := range []string{"fc1", "fc2", "fc3"} {
		for _, p := range []string{"weight", "bias"} {
			name := layer + "." + p
			f, err := model.Open(path.Join("reference/model", dir, name+".npy"))
			if err != nil {
				return nil, err
			}
			t, err := tensorfile.ReadNpy(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("testvectors: %s/%s: %w", dir, name, err)
			}
			t.Name = name + suffix
			ts = append(ts, t)
		}
	}
	return ts, nil
}
