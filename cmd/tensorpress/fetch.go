package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tensorpress/tensorpress/auth"
	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/tensorfile"
)

const fetchText = `
fetch pulls a model version from the hub at --hub and writes it to --out:
a .safetensors file (the version number in its metadata, under
"tensorpress.version"), or .npy files, one a tensor, in a directory.
Chunks are written where they belong as they arrive: memory is a few
chunks whatever the model's size (with --base, also the base's copy of
the tensor arriving). Every tensor is checked against the hub's SHA-256.

Files appear under their final names only complete and checked: until
then they are model.safetensors.part (DIR/NAME.npy.part), with a record
of how far the fetch got beside them (model.safetensors.part.json,
DIR/.tensorpress-fetch.json). Run the same fetch again after a kill and it
resumes from there (the same version: with --version 0, while no newer
one is published); the tensors written before are checked against the
hub's digests.

--hub is host[:port] (port 7077 if none), [ipv6]:port, dns:///host:port,
unix:///path, http://host[:port] (plain text) or https://host[:port] (TLS,
the system's roots unless --tls-ca). TLS with --tls-ca (the CA of the
hub's certificate), mutual TLS with --tls-cert and --tls-key, and a
shared token with --token-file, as the hub requires.

A stream that breaks (the hub restarted, drained, the connection lost) is
opened again after a pause (0.1 s, doubling to 5 s, jittered) and the
fetch resumes where it was, up to --retries times in a row, as long as a
chunk comes within --stall and the fetch ends within --deadline.

With --base, a .safetensors file an earlier fetch wrote, the hub sends the
tensors that version also has as deltas against it (lossless: the result
is bit for bit the version's). A base the hub no longer keeps gives full
copies, and fetch says so; tensors whose base copy does not match the
hub's are fetched whole again, with a warning naming the base.

Progress goes to stderr: a line every --progress (updated in place on a
terminal). The summary goes to stdout.
`

const fetchConfigText = `
Every flag can also come from --config FILE, a YAML map from flag names to
values (the command line wins where both set one):

  # tensorpress fetch --config fetch.yaml
  hub: hub.internal:7077
  out: /models/current.safetensors
  tls-ca: /etc/tensorpress/ca.pem
  token-file: /etc/tensorpress/token
  stall: 2m
`

// versionKey is the safetensors metadata key of the version fetched.
const versionKey = "tensorpress.version"

// fetchOpts are fetch's flags.
type fetchOpts struct {
	hub, out, base      string
	npy, lossless       bool
	fastDeltas          bool
	version             uint64
	auth                auth.Config
	stall, deadline     time.Duration
	progress            time.Duration
	retries             int
	stdout, stderr      io.Writer
	synopsis, usageText string
}

func fetchFlags(args []string, stdout, stderr io.Writer) (*fetchOpts, error) {
	o := &fetchOpts{stdout: stdout, stderr: stderr}
	synopsis := "fetch --hub ADDR --out PATH [flags]"
	fs := newFlags("fetch", synopsis, fetchText, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tensorpress %s\n\n%s\n%s\nFlags:\n", synopsis, strings.TrimSpace(fetchText)+"\n", strings.TrimSpace(fetchConfigText)+"\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.hub, "hub", "", "the hub's `address` (see above; required)")
	fs.Uint64Var(&o.version, "version", 0, "the `version` to fetch (0: the newest)")
	fs.StringVar(&o.out, "out", "", "`path`: a .safetensors file, or a directory for .npy files (one that exists, or ending in /, or with --npy) (required)")
	fs.BoolVar(&o.npy, "npy", false, "write .npy files into the directory --out, made if need be")
	fs.StringVar(&o.base, "base", "", "a .safetensors `file` an earlier fetch wrote: fetch deltas against it")
	fs.BoolVar(&o.lossless, "lossless", true, "refuse lossy coding (the hub's profile may allow it otherwise)")
	fs.BoolVar(&o.fastDeltas, "fast-deltas", false, "with --base: deltas that decode at over 1 GB/s a core instead of the smallest (about 250 MB/s), for links faster than that")
	fs.StringVar(&o.auth.CAFile, "tls-ca", "", "CA certificate `file` (PEM) to check the hub's certificate: TLS on")
	fs.StringVar(&o.auth.CertFile, "tls-cert", "", "client certificate `file` (PEM) for mutual TLS, with --tls-key")
	fs.StringVar(&o.auth.KeyFile, "tls-key", "", "client key `file` (PEM)")
	fs.StringVar(&o.auth.ServerName, "tls-server-name", "", "the `name` to check the hub's certificate for (default: the host of --hub)")
	fs.StringVar(&o.auth.TokenFile, "token-file", "", "`file` holding the hub's shared token")
	fs.DurationVar(&o.stall, "stall", 60*time.Second, "give up when no chunk has come for this long, reconnections included (0: never)")
	fs.DurationVar(&o.deadline, "deadline", 0, "give up when the whole fetch has not ended after this long (0: no deadline)")
	fs.IntVar(&o.retries, "retries", -1, "times in a row a broken stream is opened again (-1: until --stall)")
	fs.DurationVar(&o.progress, "progress", 5*time.Second, "`interval` of the progress lines on stderr (0: none)")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	return o, o.check()
}

// check refuses flags that do not go together, and says what --out is.
func (o *fetchOpts) check() error {
	switch {
	case o.hub == "":
		return usagef("--hub is required")
	case o.out == "":
		return usagef("--out is required")
	case (o.auth.CertFile == "") != (o.auth.KeyFile == ""):
		return usagef("--tls-cert and --tls-key go together")
	case o.stall < 0 || o.deadline < 0 || o.progress < 0:
		return usagef("--stall, --deadline and --progress cannot be negative")
	}
	st := strings.HasSuffix(o.out, ".safetensors")
	if st && o.npy {
		return usagef("--npy writes a directory, --out %s names a .safetensors file", o.out)
	}
	if st {
		return nil
	}
	fi, err := os.Stat(o.out)
	switch {
	case err == nil && fi.IsDir():
		o.npy = true
	case err == nil:
		return usagef("--out %s is a file, not a .safetensors one nor a directory", o.out)
	case o.npy || strings.HasSuffix(o.out, "/") || strings.HasSuffix(o.out, string(os.PathSeparator)):
		o.npy = true
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
	default:
		return usagef("--out %s: not a .safetensors file, and no such directory: give PATH.safetensors, an existing directory, a path ending in / or --npy for .npy files", o.out)
	}
	return nil
}

func cmdFetch(args []string, stdout, stderr io.Writer) error {
	o, err := fetchFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		// The heap is a few chunks at a time, churned: collected at half
		// its size again rather than twice, for a lower peak (about 40
		// MiB instead of 46 for any model size).
		defer debug.SetGCPercent(debug.SetGCPercent(50))
	}
	conn, target, err := dialHub(o.hub, o.auth, hub.DefaultRetryMaxWait)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	if o.deadline > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), o.deadline)
	}
	defer cancel()
	r := &fetchRun{o: o, c: hubpb.NewHubClient(conn), prog: newProgress(stderr, o.progress)}
	if err := r.findVersion(ctx, target.TLS || o.auth.ClientTLS()); err != nil {
		return err
	}
	if o.base != "" {
		bf, err := r.openBase()
		if err != nil {
			return err
		}
		defer bf.Close()
	}
	return r.run(ctx)
}

// fetchRun is one run of fetch.
type fetchRun struct {
	o        *fetchOpts
	c        hubpb.HubClient
	prog     *progress
	info     *hubpb.VersionInfo
	baseV    uint64
	baseFile *tensorfile.SafetensorsFile
	out      *fetchOut
	res      hub.Result
	resumed  bool
	refetch  int
}

// findVersion asks the hub for its versions, trying again while it
// cannot be reached, within --stall, and picks the one to fetch.
func (r *fetchRun) findVersion(ctx context.Context, secure bool) error {
	if r.o.stall > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.o.stall)
		defer cancel()
	}
	var vs *hubpb.VersionsReply
	for try := 1; ; try++ {
		var err error
		if vs, err = r.c.Versions(ctx, &hubpb.VersionsRequest{}); err == nil {
			break
		}
		if nh := notHub(r.o.hub, secure, err); nh != nil {
			return nh
		}
		code := status.Code(err)
		if code != codes.Unavailable && code != codes.DeadlineExceeded || r.o.retries >= 0 && try > r.o.retries {
			return fmt.Errorf("the hub at %s: %w", r.o.hub, err)
		}
		wait := min(hub.DefaultRetryWait<<min(try-1, 10), hub.DefaultRetryMaxWait)
		wait = wait/2 + rand.N(wait/2+1)
		r.prog.retry(hub.RetryInfo{Attempt: try, Wait: wait, Err: err})
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			hint := ""
			if msg := err.Error(); secure && (strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset")) {
				// TLS 1.3: a server that refuses the client's
				// certificate says so after the client's handshake.
				hint = " (the hub closes the TLS connection: does it accept this client certificate, --tls-cert?)"
			}
			return fmt.Errorf("the hub at %s: no answer within %v (--stall, --deadline): %w%s", r.o.hub, r.o.stall, err, hint)
		}
	}
	for _, v := range vs.Versions {
		if r.o.version == 0 || v.Version == r.o.version {
			r.info = v
			return nil
		}
	}
	have := make([]string, len(vs.Versions))
	for i, v := range vs.Versions {
		have[i] = strconv.FormatUint(v.Version, 10)
	}
	if r.o.version == 0 {
		return fmt.Errorf("the hub at %s serves no version yet", r.o.hub)
	}
	return fmt.Errorf("the hub at %s does not serve version %d (it serves %s)", r.o.hub, r.o.version, strings.Join(have, ", "))
}

// openBase opens --base and reads the version it holds.
func (r *fetchRun) openBase() (*tensorfile.SafetensorsFile, error) {
	bf, err := tensorfile.OpenSafetensorsFile(r.o.base)
	if err != nil {
		return nil, fmt.Errorf("--base: %w", err)
	}
	v, err := strconv.ParseUint(bf.Metadata()[versionKey], 10, 64)
	if err != nil || v == 0 {
		bf.Close()
		return nil, fmt.Errorf("--base %s: no %s in its metadata (not written by fetch)", r.o.base, versionKey)
	}
	r.baseFile, r.baseV = bf, v
	return bf, nil
}

// run fetches into the output (resuming what an earlier run left), the
// tensors whose base did not match again whole, and renames the result
// into place.
func (r *fetchRun) run(ctx context.Context) error {
	o := r.o
	out, resumed, err := openOut(o.out, o.npy, outKey{r.info.Version, r.baseV, o.lossless}, int(r.info.Tensors), int64(r.info.Bytes))
	if err != nil {
		return err
	}
	defer out.close()
	r.out, r.resumed = out, resumed
	r.prog.begin(int(r.info.Tensors), int64(r.info.Bytes), out)
	if !out.st.Done {
		if err := r.fetchMain(ctx); err != nil {
			return err
		}
	}
	if err := r.fetchAgain(ctx); err != nil {
		return err
	}
	if err := out.commit(); err != nil {
		return err
	}
	r.prog.end()
	r.report()
	return nil
}

// fetchMain fetches every chunk after those the output has.
func (r *fetchRun) fetchMain(ctx context.Context) error {
	var werr error
	req := r.request()
	req.ResumeAfter = r.out.st.Seq
	req.Base = r.baseV
	if r.baseFile != nil {
		req.BaseTensor = func(name string) *codec.Tensor {
			t, err := r.baseFile.Read(name)
			if err != nil {
				return nil
			}
			return t
		}
	}
	req.Progress = func(seq uint64) {
		if werr == nil && seq > 1 {
			// Not seq itself: a chunk's record after the last would
			// leave nothing to resume.
			werr = r.out.checkpoint(seq - 1)
		}
		r.prog.tick()
	}
	res, err := hub.FetchChunks(ctx, r.c, req, func(t *codec.Tensor) error {
		if werr != nil {
			return werr
		}
		r.prog.add(t)
		return r.out.write(t)
	})
	r.res = res
	var be *hub.BaseError
	var again []string
	switch {
	case errors.As(err, &be):
		again = be.Names
		fmt.Fprintf(r.o.stderr, "warning: --base %s does not match version %d of the hub for %d of %d tensors (%s): fetching them whole\n",
			r.o.base, r.baseV, len(be.Names), len(res.Digests), strings.Join(be.Names[:min(3, len(be.Names))], ", "))
	case err != nil:
		if errors.Is(err, codec.ErrChecksum) || errors.Is(err, codec.ErrCorrupt) || status.Code(err) == codes.InvalidArgument {
			r.out.discard() // what is on disk does not fit what the hub sends
		}
		return fmt.Errorf("the hub at %s: %w", r.o.hub, err)
	}
	return r.out.mainDone(res.Digests, res.Unchecked, again)
}

// request is the request every fetch of this run starts from.
func (r *fetchRun) request() hub.Request {
	return hub.Request{Version: r.info.Version, RequireLossless: r.o.lossless, Retries: r.o.retries,
		Stall: r.o.stall, OnRetry: r.prog.retry, FastDeltas: r.o.fastDeltas}
}

// fetchAgain fetches whole, without a base, the tensors the output still
// lacks or has wrong.
func (r *fetchRun) fetchAgain(ctx context.Context) error {
	names := r.out.st.Refetch
	if len(names) == 0 {
		return nil
	}
	pats := make([]string, len(names))
	for i, n := range names {
		pats[i] = escapeGlob(n)
	}
	req := r.request()
	req.Specs = []hub.Spec{{Names: pats}}
	res, err := hub.FetchChunks(ctx, r.c, req, func(t *codec.Tensor) error {
		r.prog.add(t)
		return r.out.write(t)
	})
	if err != nil {
		return fmt.Errorf("the hub at %s: fetching %d tensors whole: %w", r.o.hub, len(names), err)
	}
	for name, d := range res.Digests {
		if r.out.st.Digests[name] != fmt.Sprintf("%x", d) {
			return fmt.Errorf("the hub at %s: tensor %q changed within version %d", r.o.hub, name, r.info.Version)
		}
	}
	r.refetch = len(names)
	r.out.st.Refetch = nil
	return r.out.save()
}

// escapeGlob makes name a path.Match pattern that matches it only.
func escapeGlob(name string) string {
	var b strings.Builder
	for _, c := range name {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// report prints the summary to stdout.
func (r *fetchRun) report() {
	var bytes int64
	for _, t := range r.out.st.Tensors {
		bytes += t.size()
	}
	w := r.o.stdout
	fmt.Fprintf(w, "version %d: %d tensors, %d bytes to %s (%d as deltas, %d whole", r.info.Version, len(r.out.st.Tensors), bytes, r.o.out, r.res.Deltas, r.res.Full)
	if len(r.res.Lossy) > 0 {
		fmt.Fprintf(w, ", %d lossy", len(r.res.Lossy))
	}
	if r.refetch > 0 {
		fmt.Fprintf(w, ", %d fetched whole again", r.refetch)
	}
	if r.resumed {
		fmt.Fprintf(w, "; resumed, %d bytes fetched by this run", r.out.Written)
	}
	if r.res.Resumed > 0 {
		fmt.Fprintf(w, "; %d streams opened again", r.res.Resumed)
	}
	fmt.Fprintln(w, ")")
	if r.res.BaseNote != "" {
		fmt.Fprintf(w, "note: %s\n", r.res.BaseNote)
	}
}
