package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tensorpress/tensorpress/codec"
	"github.com/tensorpress/tensorpress/hub"
	"github.com/tensorpress/tensorpress/hub/hubpb"
	"github.com/tensorpress/tensorpress/tensorfile"
)

const fetchText = `
fetch pulls a model version from the hub at --hub and writes it to --out:
a .safetensors file (the version number in its metadata, under
"tensorpress.version"), or a directory of .npy files, one a tensor,
written chunk by chunk as they arrive (memory: a few chunks, whatever the
model's size). Every tensor is checked against the hub's SHA-256.

With --base, a .safetensors file an earlier fetch wrote, the hub sends the
tensors that version also has as deltas against it (lossless: the result
is bit for bit the version's). A base the hub no longer keeps gives full
copies, and fetch says so. A broken stream is resumed --retries times.
`

// versionKey is the safetensors metadata key of the version fetched.
const versionKey = "tensorpress.version"

func cmdFetch(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("fetch", "fetch --hub ADDR --out PATH [flags]", fetchText, stderr)
	addr := fs.String("hub", "", "the hub's `address` (host:port; required)")
	version := fs.Uint64("version", 0, "the `version` to fetch (0: the newest)")
	out := fs.String("out", "", "`path`: a .safetensors file, or a directory for .npy files (required)")
	base := fs.String("base", "", "a .safetensors `file` of an earlier version: fetch deltas against it")
	lossless := fs.Bool("lossless", true, "refuse lossy coding (the hub's profile may allow it otherwise)")
	caFile := fs.String("tls-ca", "", "CA certificate `file` (PEM) to check the hub's TLS certificate (default: no TLS)")
	timeout := fs.Duration("timeout", 30*time.Minute, "deadline of the whole fetch")
	retries := fs.Int("retries", 3, "times a broken stream is resumed")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *addr == "":
		return usagef("--hub is required")
	case *out == "":
		return usagef("--out is required")
	case *base != "" && !strings.HasSuffix(*out, ".safetensors"):
		return usagef("--base needs a .safetensors --out (deltas are applied in memory)")
	}
	creds := insecure.NewCredentials()
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no PEM certificate", *caFile)
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c := hubpb.NewHubClient(conn)
	req := hub.Request{Version: *version, RequireLossless: *lossless, Retries: *retries}
	var res hub.Result
	var n, bytes int64
	if strings.HasSuffix(*out, ".safetensors") {
		res, n, bytes, err = fetchFile(ctx, c, req, *base, *out)
	} else {
		res, n, bytes, err = fetchNpy(ctx, c, req, *out)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "version %d: %d tensors, %d bytes to %s (%d as deltas, %d whole", res.Version, n, bytes, *out, res.Deltas, res.Full)
	if len(res.Lossy) > 0 {
		fmt.Fprintf(stdout, ", %d lossy", len(res.Lossy))
	}
	fmt.Fprintln(stdout, ")")
	if res.BaseNote != "" {
		fmt.Fprintf(stdout, "note: %s\n", res.BaseNote)
	}
	return nil
}

// fetchFile fetches whole tensors (deltas applied against base) and
// writes them as a safetensors file, replacing out only once complete.
func fetchFile(ctx context.Context, c hubpb.HubClient, req hub.Request, base, out string) (hub.Result, int64, int64, error) {
	if base != "" {
		bf, err := tensorfile.OpenSafetensorsFile(base)
		if err != nil {
			return hub.Result{}, 0, 0, err
		}
		defer bf.Close()
		v, err := strconv.ParseUint(bf.Metadata()[versionKey], 10, 64)
		if err != nil || v == 0 {
			return hub.Result{}, 0, 0, fmt.Errorf("--base %s: no %s in its metadata (not written by fetch)", base, versionKey)
		}
		req.Base = v
		req.BaseTensor = func(name string) *codec.Tensor {
			t, err := bf.Read(name)
			if err != nil {
				return nil
			}
			return t
		}
	}
	var ts []*codec.Tensor
	var bytes int64
	res, err := hub.Fetch(ctx, c, req, func(t *codec.Tensor) error {
		ts = append(ts, t)
		bytes += int64(len(t.Data))
		return nil
	})
	if err != nil {
		return res, 0, 0, err
	}
	tmp := out + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return res, 0, 0, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = tensorfile.WriteSafetensors(bw, ts, map[string]string{versionKey: strconv.FormatUint(res.Version, 10)})
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return res, int64(len(ts)), bytes, err
}

// fetchNpy streams the chunks into one .npy file a tensor in dir.
func fetchNpy(ctx context.Context, c hubpb.HubClient, req hub.Request, dir string) (hub.Result, int64, int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return hub.Result{}, 0, 0, err
	}
	var f *os.File
	var bw *bufio.Writer
	var left, n, bytes int64
	finish := func() error {
		if f == nil {
			return nil
		}
		err := bw.Flush()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		f = nil
		return err
	}
	res, err := hub.FetchChunks(ctx, c, req, func(t *codec.Tensor) error {
		if t.Offset == 0 {
			if err := finish(); err != nil {
				return err
			}
			if t.Name == "" || strings.ContainsAny(t.Name, `/\`) || t.Name == "." || t.Name == ".." {
				return fmt.Errorf("tensor name %q cannot be a file name", t.Name)
			}
			var err error
			if f, err = os.Create(filepath.Join(dir, t.Name+".npy")); err != nil {
				return err
			}
			bw = bufio.NewWriterSize(f, 1<<20)
			head, err := tensorfile.AppendNpyHeader(nil, t.DType, t.Shape, 1)
			if err != nil {
				return err
			}
			if _, err := bw.Write(head); err != nil {
				return err
			}
			left = t.NumBytes()
			n++
		}
		if _, err := bw.Write(t.Data); err != nil {
			return err
		}
		bytes += int64(len(t.Data))
		if left -= int64(len(t.Data)); left == 0 {
			return finish()
		}
		return nil
	})
	if ferr := finish(); err == nil {
		err = ferr
	}
	return res, n, bytes, err
}
