package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMain lets this test binary serve as the server and the clients'
// processes that 'hub' starts (os.Executable is the test binary here).
func TestMain(m *testing.M) {
	if ok, err := hubChild(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHubCommand(t *testing.T) {
	var out, errb strings.Builder
	if code := run([]string{"hub", "--clients", "3", "--tensors", "12", "--rtt", "1ms", "--format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	rows := map[string]hubRow{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r hubRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows[r.Mode] = r
	}
	if len(rows) != 3 || rows["hub"].RPCs != 3 || rows["per-tensor"].RPCs != 36 || rows["per-tensor-gzip"].RPCs != 36 {
		t.Fatalf("rows %+v", rows)
	}
	if h := rows["hub"]; h.ServerBytes <= 0 || h.ServerBytes >= rows["per-tensor"].ServerBytes || h.ServerCPU <= 0 || h.ServerRSSMiB <= 0 {
		t.Fatalf("hub row %+v against %+v", h, rows["per-tensor"])
	}
	for _, bad := range [][]string{{"hub", "--clients", "0"}, {"hub", "--tensors", "0"}, {"hub", "--rtt", "-1s"}, {"hub", "--format", "xml"}} {
		if code := run(bad, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}
