package v1

import (
	"slices"
	"strings"
	"testing"
)

func TestParseTopologyKeys(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: `["zone"]`, want: []string{"zone"}},
		{in: `["zone","*"]`, want: []string{"zone", "*"}},
		{in: `[ "topology.kubernetes.io/zone", "rack", "*" ]`, want: []string{"topology.kubernetes.io/zone", "rack", "*"}},
		{in: `["*"]`, want: []string{"*"}},
		{in: `"zone"`, wantErr: "not a JSON list of strings"},
		{in: ``, wantErr: "not a JSON list of strings"},
		{in: `[1]`, wantErr: "not a JSON list of strings"},
		{in: `null`, wantErr: "an empty list"},
		{in: `[]`, wantErr: "an empty list"},
		{in: `[""]`, wantErr: "key 0 is empty"},
		{in: `["zone",""]`, wantErr: "key 1 is empty"},
		{in: `["*","zone"]`, wantErr: `"*" may only be the last key`},
		{in: `["zone","zone"]`, wantErr: `key "zone" appears twice`},
		{in: `["zone","*","*"]`, wantErr: `"*" may only be the last key`},
	} {
		got, err := ParseTopologyKeys(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), AnnotationTopologyKeys) {
				t.Errorf("ParseTopologyKeys(%s) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseTopologyKeys(%s) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
