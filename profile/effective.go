package profile

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v4"
)

// Effective renders the profile as YAML with every default written out:
// the settings a writer and the autotuner will use. Load accepts the
// result and gives an equal profile, whose Effective output is the same.
func (p *Profile) Effective() ([]byte, error) {
	root := mapNode()
	if p.Name != "" {
		root.HeadComment = fmt.Sprintf("Effective settings of profile %s, defaults filled in.", p.Name)
	} else {
		root.HeadComment = "Effective settings of the profile, defaults filled in."
	}
	add(root, "version", intNode(Version))
	if p.Name != "" {
		add(root, "name", strNode(p.Name))
	}
	if p.Description != "" {
		add(root, "description", strNode(p.Description))
	}
	add(root, "chunk_size", sizeNode(int64(p.ChunkSize)))
	dev := p.Device
	if dev == "" {
		dev = DeviceCPU
	}
	add(root, "device", strNode(string(dev)))

	l := p.Limits
	lim := mapNode()
	add(lim, "max_frame_size", sizeNode(l.MaxFrameSize))
	add(lim, "max_decoded_size", sizeNode(l.MaxDecodedSize))
	add(lim, "max_slow_decoded", sizeNode(l.MaxSlowDecoded))
	add(lim, "max_tensor_size", sizeNode(l.MaxTensorSize))
	add(lim, "max_dims", intNode(int64(l.MaxDims)))
	add(lim, "max_segments", intNode(int64(l.MaxSegments)))
	add(lim, "max_tensors", intNode(int64(l.MaxTensors)))
	add(lim, "max_name_len", intNode(int64(l.MaxNameLen)))
	add(lim, "max_tags", intNode(int64(l.MaxTags)))
	add(lim, "max_header_size", sizeNode(int64(l.MaxHeaderSize)))
	add(root, "limits", lim)

	a := p.Autotune
	at := mapNode()
	add(at, "enabled", boolNode(a.Enabled))
	cores := intNode(int64(a.Cores))
	if a.Cores == 0 {
		cores.LineComment = "min(4, GOMAXPROCS)"
	}
	add(at, "cores", cores)
	add(at, "cpu_budget", floatNode(a.CPUBudget))
	add(at, "explore", floatNode(a.Explore))
	add(at, "hysteresis", floatNode(a.Hysteresis))
	add(at, "min_frames", intNode(int64(a.MinFrames)))
	if a.LinkHint > 0 {
		lh := strNode(FormatRate(a.LinkHint))
		lh.LineComment = fmt.Sprintf("%d bytes/s", a.LinkHint)
		add(at, "link_hint", lh)
	}
	add(root, "autotune", at)

	if len(p.Recipes) > 0 {
		rs := mapNode()
		for _, r := range p.Recipes {
			add(rs, r.Name, quotedNode(r.Recipe.String()))
		}
		add(root, "recipes", rs)
	}

	rules := &yaml.Node{Kind: yaml.SequenceNode}
	for i := range p.Rules {
		rules.Content = append(rules.Content, ruleNode(&p.Rules[i]))
	}
	add(root, "rules", rules)
	return yaml.Dump(root, yaml.WithIndent(2), yaml.WithLineWidth(-1))
}

func ruleNode(r *Rule) *yaml.Node {
	n := mapNode()
	m := &r.Match
	if m.IsCatchAll() {
		n.HeadComment = "every tensor"
	} else {
		mn := mapNode()
		if len(m.Names) > 0 {
			l := flowList()
			for _, s := range m.Names {
				l.Content = append(l.Content, strNode(s))
			}
			add(mn, "name", l)
		}
		if len(m.DTypes) > 0 {
			l := flowList()
			for _, d := range m.DTypes {
				l.Content = append(l.Content, strNode(d.String()))
			}
			add(mn, "dtype", l)
		}
		if m.MinSize > 0 {
			add(mn, "min_size", sizeNode(m.MinSize))
		}
		if m.MaxSize > 0 {
			add(mn, "max_size", sizeNode(m.MaxSize))
		}
		if len(m.Tags) > 0 {
			tn := mapNode()
			tn.Style = yaml.FlowStyle
			for _, t := range m.Tags {
				if len(t.Values) == 1 {
					add(tn, t.Key, strNode(t.Values[0]))
					continue
				}
				l := flowList()
				for _, v := range t.Values {
					l.Content = append(l.Content, strNode(v))
				}
				add(tn, t.Key, l)
			}
			add(mn, "tags", tn)
		}
		add(n, "match", mn)
	}
	add(n, "require_lossless", boolNode(r.RequireLossless))
	rs := flowList()
	for _, nr := range r.Recipes {
		if nr.Name != "" {
			rs.Content = append(rs.Content, strNode(nr.Name))
		} else {
			rs.Content = append(rs.Content, quotedNode(nr.Recipe.String()))
		}
	}
	if r.Auto {
		rs.Content = append(rs.Content, strNode("auto"))
	}
	add(n, "recipes", rs)
	add(n, "error_budget", floatNode(r.ErrorBudget))
	if len(r.Gradients) > 0 {
		l := flowList()
		for _, s := range r.Gradients {
			l.Content = append(l.Content, quotedNode(s.String()))
		}
		add(n, "gradient", l)
	}
	if len(r.Densities) > 0 {
		l := flowList()
		for _, x := range r.Densities {
			l.Content = append(l.Content, floatNode(x))
		}
		add(n, "densities", l)
	}
	if len(r.Bits) > 0 {
		l := flowList()
		for _, b := range r.Bits {
			l.Content = append(l.Content, intNode(int64(b)))
		}
		add(n, "bits", l)
	}
	return n
}

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func flowList() *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
}

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, strNode(key), v)
}

func strNode(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func quotedNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func intNode(v int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v, 10)}
}

func boolNode(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func floatNode(x float64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(x, 'g', -1, 64)}
}

// sizeNode writes n with a binary unit when one divides it, else as an
// integer.
func sizeNode(n int64) *yaml.Node {
	s := FormatSize(n)
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return intNode(n)
	}
	return strNode(s)
}
