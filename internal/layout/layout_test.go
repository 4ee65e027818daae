package layout

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/tensorpress/tensorpress"

// imports returns, per package of the module (relative to its root), the
// module packages it imports, as go list reports them for this platform.
func imports(t *testing.T, root string) map[string][]string {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	cmd := exec.Command(goTool, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		name := rel(f[0])
		deps := []string{}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module+"/") {
				deps = append(deps, rel(imp))
			}
		}
		slices.Sort(deps)
		pkgs[name] = deps
	}
	return pkgs
}

func rel(path string) string { return strings.TrimPrefix(path, module+"/") }

var quoted = regexp.MustCompile("`([^`]+)`")

// table reads the rows of the layout table: package, then the "depends
// on" column.
func table(t *testing.T, doc string) map[string]string {
	rows := map[string]string{}
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "| package | role | depends on |") {
			in = true
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 3 || strings.HasPrefix(cells[0], "---") {
			continue
		}
		m := quoted.FindStringSubmatch(cells[0])
		if m == nil {
			t.Errorf("ARCHITECTURE.md: a layout row without a package: %s", line)
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("ARCHITECTURE.md: %s has two rows", m[1])
		}
		rows[m[1]] = cells[len(cells)-1]
	}
	if len(rows) == 0 {
		t.Fatal("ARCHITECTURE.md: no layout table (| package | role | depends on |)")
	}
	return rows
}

func TestArchitectureTable(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := imports(t, root)
	rows := table(t, string(doc))
	for name, deps := range pkgs {
		col, ok := rows[name]
		if !ok {
			t.Errorf("ARCHITECTURE.md: no layout row for %s (imports %v)", name, deps)
			continue
		}
		if strings.Contains(col, "all of the above") {
			continue
		}
		listed := []string{}
		for _, m := range quoted.FindAllStringSubmatch(col, -1) {
			if _, isPkg := pkgs[m[1]]; isPkg {
				listed = append(listed, m[1])
			}
		}
		slices.Sort(listed)
		if !slices.Equal(listed, deps) {
			t.Errorf("ARCHITECTURE.md: %s depends on %v, the table says %v", name, deps, listed)
		}
	}
	for name := range rows {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("ARCHITECTURE.md: layout row for %s, which is not a package of the module", name)
		}
	}
}

// forbidden are edges no package of the list may have, directly or
// through others (go list -deps): a small package must not pull in the
// house. Each names the package, and the import path prefixes its
// dependencies must not start with.
var forbidden = []struct {
	pkg string
	not []string
	why string
}{
	{"rpc", []string{"go.yaml.in/yaml", "gopkg.in/yaml", "gonum.org/v1/gonum"}, "a gRPC compressor links no YAML and no linear algebra"},
	{"transport", []string{module + "/gpu", "github.com/ebitengine/purego", module + "/gradient", module + "/profile"}, "a byte-stream connection links no device code and no tensor session (package session)"},
	{"hub", []string{module + "/gpu", "github.com/ebitengine/purego"}, "the GPU is a gradient device backend, linked by the programs that want it"},
	{"hub", []string{"github.com/prometheus"}, "collectors live in package metrics: the core never imports Prometheus"},
	{"hub/natsfan", []string{"github.com/prometheus"}, "collectors live in package metrics: the core never imports Prometheus"},
	{"proxy", []string{"github.com/prometheus"}, "collectors live in package metrics: the core never imports Prometheus"},
	{"profile", []string{module + "/gradient"}, "profiles are data: their users parse the gradient specs"},
	{"gpu", []string{module + "/profile"}, "the GPU knows devices, not profiles (gradient.UseDevice reads a profile's device)"},
}

// TestForbiddenEdges holds the packages to the rules in forbidden.
func TestForbiddenEdges(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forbidden {
		cmd := exec.Command(goTool, "list", "-deps", "./"+f.pkg)
		cmd.Dir = root
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", f.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, p := range f.not {
				if dep == p || strings.HasPrefix(dep, p+"/") {
					t.Errorf("%s depends on %s (through go list -deps): %s", f.pkg, dep, f.why)
				}
			}
		}
	}
}
