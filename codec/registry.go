package codec

import (
	"fmt"
	"sort"
	"sync"
)

var registry struct {
	sync.RWMutex
	byID   map[StageID]*Stage
	byName map[string]alias
}

// alias maps a recipe name to a stage with implied leading arguments
// ("shuffle4" is shuffle with width 4).
type alias struct {
	stage *Stage
	args  []Arg
}

// Register adds a stage. It panics when the ID or name is taken or the
// stage is incomplete: registration happens in init functions, and a clash
// is a programmer error. Use RegisterNew for a non-panicking variant.
func Register(s *Stage) {
	if err := RegisterNew(s); err != nil {
		panic(err)
	}
}

// RegisterNew adds a stage unless its ID or name is already taken.
func RegisterNew(s *Stage) error {
	if s == nil || s.ID == 0 || s.Name == "" || s.New == nil || s.Load == nil || s.Kind == 0 {
		return fmt.Errorf("codec: Register: incomplete stage %+v", s)
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byID == nil {
		registry.byID = map[StageID]*Stage{}
		registry.byName = map[string]alias{}
	}
	if old, ok := registry.byID[s.ID]; ok {
		return fmt.Errorf("codec: stage ID %d already registered as %q", s.ID, old.Name)
	}
	if _, ok := registry.byName[s.Name]; ok {
		return fmt.Errorf("codec: stage name %q already registered", s.Name)
	}
	registry.byID[s.ID] = s
	registry.byName[s.Name] = alias{stage: s}
	return nil
}

// RegisterAlias makes name parse as stage (already registered) with the
// given leading arguments. Printing uses the alias for ops whose String
// method returns it.
func RegisterAlias(name string, stage StageID, args ...Arg) {
	registry.Lock()
	defer registry.Unlock()
	s, ok := registry.byID[stage]
	if !ok {
		panic(fmt.Sprintf("codec: RegisterAlias(%q): stage %d not registered", name, stage))
	}
	if _, ok := registry.byName[name]; ok {
		panic(fmt.Sprintf("codec: RegisterAlias: name %q already registered", name))
	}
	registry.byName[name] = alias{stage: s, args: args}
}

// Unregister removes a stage and its aliases. It is for tests that register
// a stage of their own; it returns a function that registers it again.
func Unregister(id StageID) (restore func()) {
	registry.Lock()
	defer registry.Unlock()
	s, ok := registry.byID[id]
	if !ok {
		return func() {}
	}
	removed := map[string]alias{}
	for n, a := range registry.byName {
		if a.stage == s {
			removed[n] = a
			delete(registry.byName, n)
		}
	}
	delete(registry.byID, id)
	return func() {
		registry.Lock()
		defer registry.Unlock()
		registry.byID[id] = s
		for n, a := range removed {
			registry.byName[n] = a
		}
	}
}

// Lookup returns the stage with the given wire ID.
func Lookup(id StageID) (*Stage, bool) {
	registry.RLock()
	defer registry.RUnlock()
	s, ok := registry.byID[id]
	return s, ok
}

// LookupName returns the stage a recipe name refers to and the arguments
// the name implies.
func LookupName(name string) (*Stage, []Arg, bool) {
	registry.RLock()
	defer registry.RUnlock()
	a, ok := registry.byName[name]
	return a.stage, a.args, ok
}

// Stages lists the registered stages by ID.
func Stages() []*Stage {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]*Stage, 0, len(registry.byID))
	for _, s := range registry.byID {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// loadOp builds the op for a stage ID and wire parameters.
func loadOp(id StageID, params []byte) (Op, error) {
	s, ok := Lookup(id)
	if !ok {
		return nil, fmt.Errorf("%w: stage ID %d", ErrUnsupported, id)
	}
	op, err := s.Load(params)
	if err != nil {
		return nil, fmt.Errorf("stage %s (ID %d): %w", s.Name, id, err)
	}
	return op, nil
}
