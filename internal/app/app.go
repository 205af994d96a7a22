// Package app is the one main of every staticip daemon: flags (pflag, with klog's and
// --version) → Options.Validate → Options.Complete (the REST config, serving, ...) → run until
// SIGINT/SIGTERM. A binary's main is one call:
//
//	func main() { app.Main(gridwrapper.ComponentName, gridwrapper.NewOptions(), gridwrapper.Run) }
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/internal/version"
)

// Options are a binary's flags; Complete turns them into what run needs (C).
type Options[C any] interface {
	AddFlags(fs *pflag.FlagSet)
	Validate() error
	Complete() (C, error)
}

// Exit codes of Run.
const (
	ExitOK    = 0
	ExitError = 1 // Complete or run failed
	ExitUsage = 2 // bad flags
)

// Main runs Run with the process' arguments and signals and exits with its code.
func Main[C any](component string, o Options[C], run func(context.Context, C) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := Run(ctx, component, os.Args[1:], os.Stdout, os.Stderr, o, run)
	stop()
	klog.Flush()
	os.Exit(code)
}

// Run parses args into o, validates, completes and runs until ctx ends; it returns the exit
// code. --version prints the version (internal/version) to stdout and returns 0.
func Run[C any](ctx context.Context, component string, args []string, stdout, stderr io.Writer, o Options[C], run func(context.Context, C) error) int {
	fs := pflag.NewFlagSet(component, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	o.AddFlags(fs)
	showVersion := false
	version.AddFlag(fs, &showVersion)
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK
		}
		fmt.Fprintf(stderr, "%s: %v (see --help)\n", component, err)
		return ExitUsage
	}
	if showVersion {
		version.Print(stdout, component)
		return ExitOK
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", component, err)
		return ExitUsage
	}
	cfg, err := o.Complete()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", component, err)
		return ExitError
	}
	klog.InfoS("Starting", "component", component, "version", version.Version)
	if err := run(ctx, cfg); err != nil {
		klog.ErrorS(err, "Exiting", "component", component)
		return ExitError
	}
	return ExitOK
}
