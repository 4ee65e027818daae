package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"
)

// DefaultCloseGrace is how long a Watcher keeps the files of a version
// the hub no longer holds open, for the fetches that were reading them.
const DefaultCloseGrace = time.Minute

// Watcher publishes the versions of a directory of versions into a Hub:
// the newest ones there at the start (Start), then each new version
// directory that appears, as a Poll finds it. A version that fails to
// publish (a file still being written, a corrupt one) is logged, once
// per error, as a warning naming the file and why, and tried again at
// the next Poll; the others are served. The files of versions the hub
// has dropped are closed CloseGrace after a Poll first finds them gone.
// Its methods are for one goroutine at a time (Run's, or the caller's).
type Watcher struct {
	h    *Hub
	dir  string
	keep int
	log  *slog.Logger

	// OnPublish, if set, is called after each version published.
	OnPublish func(v uint64)
	// CloseGrace is DefaultCloseGrace unless set before Start.
	CloseGrace time.Duration
	// Empty, if set before Start, lets Start find no version directory:
	// it logs that it waits for one (a hub started before the first
	// version is written, whose Run publishes it as it appears).
	Empty bool

	done    map[uint64]bool      // published
	failed  map[uint64]string    // last error logged, by version
	open    map[uint64]io.Closer // files of published versions
	dropped map[uint64]time.Time // when a version was found gone from the hub
}

// NewWatcher returns a Watcher of dir for h, which keeps keep versions
// (its retention), logging to log.
func NewWatcher(h *Hub, dir string, keep int, log *slog.Logger) *Watcher {
	return &Watcher{h: h, dir: dir, keep: keep, log: log, CloseGrace: DefaultCloseGrace, done: map[uint64]bool{},
		failed: map[uint64]string{}, open: map[uint64]io.Closer{}, dropped: map[uint64]time.Time{}}
}

// Start publishes the newest keep versions that can be published now,
// the newest first; one that cannot is logged and skipped. It fails only
// when the directory cannot be read or, unless Empty, holds no version
// directory (a misconfiguration, not a bad version).
func (w *Watcher) Start() error {
	vs, err := Versions(w.dir)
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		if !w.Empty {
			return fmt.Errorf("%s: no version directories (1, 2, ...)", w.dir)
		}
		w.log.Warn("no version yet; waiting for one", "dir", w.dir)
		return nil
	}
	served := 0
	for i := len(vs) - 1; i >= 0 && served < w.keep; i-- {
		if w.try(vs[i]) {
			served++
		}
	}
	if served == 0 {
		w.log.Error("no version can be served; waiting for one", "dir", w.dir)
	}
	return nil
}

// try publishes version v, logging a failure (once per error) and
// reporting whether it is published.
func (w *Watcher) try(v uint64) bool {
	path := filepath.Join(w.dir, strconv.FormatUint(v, 10))
	err := w.publish(v, path)
	if err != nil {
		if msg := err.Error(); w.failed[v] != msg {
			w.failed[v] = msg
			w.log.Warn("version not served; tried again at the next poll", "version", v, "err", err)
		}
		return false
	}
	delete(w.failed, v)
	w.log.Info("published", "version", v, "dir", path)
	return true
}

func (w *Watcher) publish(v uint64, path string) error {
	vd, err := OpenVersion(path)
	if err != nil {
		return err
	}
	c, err := vd.Publish(w.h, v)
	if err != nil {
		return err
	}
	w.done[v] = true
	w.open[v] = c
	if w.OnPublish != nil {
		w.OnPublish(v)
	}
	return nil
}

// Poll publishes the versions that appeared since the last poll (newer
// than the oldest the hub holds; older ones would be dropped at once) and
// closes the files of versions dropped more than CloseGrace ago.
func (w *Watcher) Poll(now time.Time) {
	vs, err := Versions(w.dir)
	if err != nil {
		w.log.Warn("watching", "dir", w.dir, "err", err)
		return
	}
	var oldest uint64
	if held := w.h.Versions(); len(held) == w.keep {
		oldest = held[len(held)-1].Version
	}
	for _, v := range vs {
		if !w.done[v] && v > oldest {
			w.try(v)
		}
	}
	w.closeDropped(now)
}

// closeDropped closes the files of the versions the hub dropped more
// than CloseGrace before now.
func (w *Watcher) closeDropped(now time.Time) {
	held := map[uint64]bool{}
	for _, info := range w.h.Versions() {
		held[info.Version] = true
	}
	for v, c := range w.open {
		if held[v] {
			continue
		}
		t, ok := w.dropped[v]
		if !ok {
			w.dropped[v] = now
			continue
		}
		if now.Sub(t) >= w.CloseGrace {
			c.Close()
			delete(w.open, v)
			delete(w.dropped, v)
		}
	}
}

// Open reports whether the files of version v are open.
func (w *Watcher) Open(v uint64) bool {
	_, ok := w.open[v]
	return ok
}

// Run polls every interval until ctx ends.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.Poll(now)
		}
	}
}

// Close closes every file still open.
func (w *Watcher) Close() error {
	var errs []error
	for v, c := range w.open {
		errs = append(errs, c.Close())
		delete(w.open, v)
	}
	return errors.Join(errs...)
}
