//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile opens path (created if create) and takes an exclusive lock on
// it without waiting (flock: released when the file is closed, the
// process killed included).
func lockFile(path string, create bool) (*os.File, error) {
	flag := os.O_RDONLY
	if create {
		flag = os.O_RDWR | os.O_CREATE
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: another fetch is writing there", path)
		}
		return nil, fmt.Errorf("%s: lock: %w", path, err)
	}
	return f, nil
}
