package testvectors

import (
	"bytes"
	"embed"
	"fmt"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/tensorfile"
)

// The federated-learning snapshot: the MLP trained with FedAvg by
// tensorpress's simulator, and one client's update of the last round
// (fl/README.md says how they were made).
//
//go:embed fl/*.safetensors
var flFiles embed.FS

// FLWeights returns the FedAvg-trained model's parameters, named like
// "fc1.weight", in the order fc1, fc2, fc3 (weight before bias).
func FLWeights() ([]*codec.Tensor, error) { return loadFL("weights") }

// FLUpdate returns client 0's update (w_local - w) of the last FedAvg
// round, named like FLWeights.
func FLUpdate() ([]*codec.Tensor, error) { return loadFL("update") }

func loadFL(name string) ([]*codec.Tensor, error) {
	b, err := flFiles.ReadFile("fl/" + name + ".safetensors")
	if err != nil {
		return nil, err
	}
	f, err := tensorfile.OpenSafetensors(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, fmt.Errorf("testvectors: fl/%s: %w", name, err)
	}
	var ts []*codec.Tensor
	for _, layer := range []string{"fc1", "fc2", "fc3"} {
		for _, p := range []string{"weight", "bias"} {
			t, err := f.Read(layer + "." + p)
			if err != nil {
				return nil, fmt.Errorf("testvectors: fl/%s: %w", name, err)
			}
			ts = append(ts, t)
		}
	}
	return ts, nil
}
