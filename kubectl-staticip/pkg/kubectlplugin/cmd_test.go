package kubectlplugin

import (
	"slices"
	"testing"
)

// named keeps the listed names in the list's order and refuses a name no item has (the BGP
// command listed nothing and said nothing for a mistyped node before it shared this with
// failover status).
func TestNamed(t *testing.T) {
	id := func(s string) string { return s }
	for _, c := range []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{nil, []string{"a", "b", "c"}, ""},
		{[]string{"c", "a"}, []string{"a", "c"}, ""},
		{[]string{"a", "x"}, nil, `things "x" not found`},
	} {
		got, err := named([]string{"a", "b", "c"}, c.args, id, "things")
		if (err == nil) != (c.wantErr == "") || (err != nil && err.Error() != c.wantErr) || !slices.Equal(got, c.want) {
			t.Errorf("named(%v) = %v, %v; want %v, %q", c.args, got, err, c.want, c.wantErr)
		}
	}
}
