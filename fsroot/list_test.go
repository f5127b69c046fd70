package fsroot

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSortedEach lists a directory of 1,000 names in byte order, whole and
// each name once, with pass budgets that need one pass, a few, or one per
// name; this package's temporary files are left out, look-alikes are not.
func TestSortedEach(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range 1000 {
		n := fmt.Sprintf("%03d-%c", (i*7919)%1000, 'a'+i%26)
		want = append(want, n)
	}
	want = append(want, ".sandbox-put-0123456789abcdeg.tmp", ".sandbox-put-x.tmp", "\xff\xfe")
	for _, n := range append(slices.Clone(want), ".sandbox-put-0123456789abcdef.tmp") {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	for _, budget := range []int{1 << 20, 2000, 1} {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := sortedEach(f, budget, func(n string) error { got = append(got, n); return nil }); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if !slices.Equal(got, want) {
			t.Errorf("budget %d: %d names, first %q; want %d sorted, first %q", budget, len(got), got[:min(3, len(got))], len(want), want[:3])
		}
	}
}
