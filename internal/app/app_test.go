package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/staticip/staticip/internal/version"
)

type opts struct {
	name      string
	completed bool
}

func (o *opts) AddFlags(fs *pflag.FlagSet) { fs.StringVar(&o.name, "name", o.name, "a name") }
func (o *opts) Validate() error {
	if o.name == "" {
		return errors.New("--name is required")
	}
	return nil
}
func (o *opts) Complete() (string, error) {
	o.completed = true
	if o.name == "fail" {
		return "", errors.New("cannot load")
	}
	return "hello " + o.name, nil
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		runErr   error
		wantCode int
		wantOut  string
		wantErr  string
		wantRun  string
	}{
		{name: "version", args: []string{"--version"}, wantCode: ExitOK, wantOut: "demo " + version.Version},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: ExitUsage, wantErr: "unknown flag: --nope"},
		{name: "invalid", args: nil, wantCode: ExitUsage, wantErr: "demo: --name is required"},
		{name: "complete fails", args: []string{"--name=fail"}, wantCode: ExitError, wantErr: "cannot load"},
		{name: "runs", args: []string{"--name=x", "-v=2"}, wantCode: ExitOK, wantRun: "hello x"},
		{name: "run fails", args: []string{"--name=x"}, runErr: errors.New("boom"), wantCode: ExitError, wantRun: "hello x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			ran := ""
			code := Run(context.Background(), "demo", tc.args, &out, &errOut, &opts{}, func(_ context.Context, c string) error {
				ran = c
				return tc.runErr
			})
			if code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) || !strings.Contains(errOut.String(), tc.wantErr) || ran != tc.wantRun {
				t.Errorf("code %d, stdout %q, stderr %q, ran %q; want %d, %q, %q, %q", code, out.String(), errOut.String(), ran,
					tc.wantCode, tc.wantOut, tc.wantErr, tc.wantRun)
			}
		})
	}
}
