// Package layout holds no code: its test checks that the layout table of
// docs/ARCHITECTURE.md matches the module as `go list` sees it. Every
// package of the module has a row, every row names a package, and the
// module packages a row's "depends on" column names in backquotes are
// exactly those the package imports (a row that says "all of the above"
// is not checked for its dependencies).
package layout
