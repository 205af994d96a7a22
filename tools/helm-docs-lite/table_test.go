package main

import (
	"strings"
	"testing"
)

func TestRows(t *testing.T) {
	values := `# The file's header: not any key's.

# Images.
image:
  # Registry host; empty: none.
  registry: ""
  tag: v1
agent:
  # Tolerations of the pods.
  tolerations:
    - operator: Exists
  # Resources | limits.
  resources:
    requests: {cpu: 20m}
  nodeSelector: {}
  # A section with a comment is a row too.
  podDisruptionBudget:
    enabled: true
`
	rows, err := Rows([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{"image", "", "Images."},
		{"image.registry", `""`, "Registry host; empty: none."},
		{"image.tag", "v1", ""},
		{"agent.tolerations", "[{operator: Exists}]", "Tolerations of the pods."},
		{"agent.resources", "", "Resources | limits."},
		{"agent.resources.requests", "{cpu: 20m}", ""},
		{"agent.nodeSelector", "{}", ""},
		{"agent.podDisruptionBudget", "", "A section with a comment is a row too."},
		{"agent.podDisruptionBudget.enabled", "true", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d: got %+v, want %+v", i, rows[i], want[i])
		}
	}
	table, err := Table([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "| `agent.resources` |  | Resources \\| limits. |") {
		t.Errorf("the | of a comment is not escaped:\n%s", table)
	}
}

func TestSplice(t *testing.T) {
	readme := "# Chart\n\n" + beginMarker + "\nold\n" + endMarker + "\n\nmore\n"
	got, err := Splice([]byte(readme), "| new |\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Chart\n\n" + beginMarker + "\n| new |\n" + endMarker + "\n\nmore\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := Splice([]byte("no markers"), "x"); err == nil {
		t.Error("a README without markers gave no error")
	}
}
