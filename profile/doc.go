// Package profile reads tensorpress profiles: YAML files that say which
// recipes and gradient compressors may be used for which tensors (by name,
// dtype, size and tags), which tensors must stay lossless, the error
// budget, the decoder limits, the chunk size and the autotuner's bounds.
// The schema (version 1) is specified in docs/PROFILES.md.
//
// # Loading
//
// Load, LoadFile and Builtin return a *Profile with every default filled
// in, or an *Error that gives the line and column of the value at fault
// and matches ErrInvalid (errors.Is). Loading is strict: unknown fields,
// values of the wrong type or out of range, recipes that do not parse,
// unknown recipe names, repeated names or keys, more than one YAML
// document, and contradictions (a lossy recipe, an error budget or a
// gradient compressor on a rule that requires lossless; min_size above
// max_size; a rule after one that matches every tensor) are errors. Load
// never panics; it bounds the input to MaxSize bytes, nesting to MaxDepth
// and the YAML nodes it visits to MaxNodes (aliases count every time they
// are used, so an alias bomb is refused quickly).
//
// Recipes are parsed by codec.ParseRecipe, so their stages must be
// registered: the package links the standard stateless stages (package
// stages: lossless, sparse and lossy), all that the built-in profiles
// name. Gradient compressors are data here: a Rule holds their text and
// place, and the program that uses them parses them with gradient.Parse
// (Profile.CheckGradients checks them all, with the place of the one at
// fault). The package does not depend on gradient's code.
//
// # Using a profile
//
// Profile.Match returns the first rule that matches a tensor; the last
// rule matches every tensor (Load appends DefaultRule when the profile's
// own rules do not end with one), so Match never returns nil. A Profile
// is not changed after loading and is safe for concurrent use.
// Profile.Effective renders the settings back as YAML that Load accepts.
//
// Built-in profiles (Builtins, Builtin) are embedded in the binary:
// lossless-fast, lossless-max, fl-gradients and archival.
//
// Recipes name stages, which register when their package is linked. A
// recipe that names a gradient stage (topk(0.01) | ..., stateless) loads
// in a program that links package gradient.
package profile

import _ "github.com/tensorpress/tensorpress/stages" // the stages recipes name
