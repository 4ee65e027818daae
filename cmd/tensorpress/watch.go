package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tensorpress/tensorpress/hub"
)

// closeGrace is how long the files of a version the hub no longer holds
// stay open, for the fetches that were reading them.
const closeGrace = time.Minute

// dirWatcher publishes the versions of a directory into a hub: those there
// at the start (the newest keep), then each new version directory that
// appears, as a poll finds it. A version that fails to publish (a file
// still being written, say) is tried again at the next poll, and its
// error logged once. The files of versions the hub has dropped are closed
// closeGrace later.
type dirWatcher struct {
	h    *hub.Hub
	dir  string
	keep int
	log  *slog.Logger

	done    map[uint64]bool        // published
	failed  map[uint64]string      // last error logged, by version
	open    map[uint64][]io.Closer // files of published versions
	dropped map[uint64]time.Time   // when a version was found gone from the hub

	onPublish func(v uint64) // called after each version published, if set
}

func newDirWatcher(h *hub.Hub, dir string, keep int, log *slog.Logger) *dirWatcher {
	return &dirWatcher{h: h, dir: dir, keep: keep, log: log, done: map[uint64]bool{},
		failed: map[uint64]string{}, open: map[uint64][]io.Closer{}, dropped: map[uint64]time.Time{}}
}

// versions lists the version directories of w.dir, oldest first.
func (w *dirWatcher) versions() ([]uint64, error) {
	ents, err := os.ReadDir(w.dir)
	if err != nil {
		return nil, err
	}
	var vs []uint64
	for _, e := range ents {
		if v, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && v > 0 && e.IsDir() {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// start publishes the newest keep versions found now; any failure is an
// error, as a hub that starts with a broken version is misconfigured.
func (w *dirWatcher) start() error {
	vs, err := w.versions()
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		return fmt.Errorf("%s: no version directories (1, 2, ...)", w.dir)
	}
	for _, v := range vs[max(0, len(vs)-w.keep):] {
		if err := w.publish(v); err != nil {
			return fmt.Errorf("version %d: %w", v, err)
		}
	}
	return nil
}

func (w *dirWatcher) publish(v uint64) error {
	cs, err := publishVersion(w.h, v, filepath.Join(w.dir, strconv.FormatUint(v, 10)))
	if err != nil {
		for _, c := range cs {
			c.Close()
		}
		return err
	}
	w.done[v] = true
	w.open[v] = cs
	if w.onPublish != nil {
		w.onPublish(v)
	}
	return nil
}

// poll publishes the versions that appeared since the last poll (newer
// than the oldest the hub holds; older ones would be dropped at once) and
// closes the files of versions dropped more than closeGrace ago.
func (w *dirWatcher) poll(now time.Time) {
	vs, err := w.versions()
	if err != nil {
		w.log.Warn("watching", "dir", w.dir, "err", err)
		return
	}
	var oldest uint64
	if held := w.h.Versions(); len(held) == w.keep {
		oldest = held[len(held)-1].Version
	}
	for _, v := range vs {
		if w.done[v] || v <= oldest {
			continue
		}
		if err := w.publish(v); err != nil {
			if msg := err.Error(); w.failed[v] != msg {
				w.failed[v] = msg
				w.log.Warn("not published yet; tried again at the next poll", "version", v, "err", err)
			}
			continue
		}
		delete(w.failed, v)
		w.log.Info("published", "version", v, "dir", w.dir)
	}
	held := map[uint64]bool{}
	for _, info := range w.h.Versions() {
		held[info.Version] = true
	}
	for v := range w.open {
		if held[v] {
			continue
		}
		t, ok := w.dropped[v]
		if !ok {
			w.dropped[v] = now
			continue
		}
		if now.Sub(t) >= closeGrace {
			for _, c := range w.open[v] {
				c.Close()
			}
			delete(w.open, v)
			delete(w.dropped, v)
		}
	}
}

// run polls every interval until ctx ends.
func (w *dirWatcher) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.poll(now)
		}
	}
}

// Close closes every file still open.
func (w *dirWatcher) Close() error {
	var errs []error
	for v, cs := range w.open {
		for _, c := range cs {
			errs = append(errs, c.Close())
		}
		delete(w.open, v)
	}
	return errors.Join(errs...)
}
