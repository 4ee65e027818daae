//go:build !unix

package main

import "os"

// lockFile opens path (created if create); on this system it takes no
// lock: two fetches to the same --out must not run at once.
func lockFile(path string, create bool) (*os.File, error) {
	flag := os.O_RDONLY
	if create {
		flag = os.O_RDWR | os.O_CREATE
	}
	return os.OpenFile(path, flag, 0o644)
}
