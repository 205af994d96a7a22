// Command helm-docs-lite writes the values table of charts/staticip/README.md from the
// comments of charts/staticip/values.yaml (a small helm-docs): every key, its default and the
// comment above it. The table sits between the lines
//
//	<!-- values-table:begin -->
//	<!-- values-table:end -->
//
// of the README. `make generate` writes it; `make verify` runs it with -check, which fails when
// the README's table is not what values.yaml gives.
//
//	tools/run.sh helm-docs-lite [-check] [-values FILE] [-readme FILE]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	values := flag.String("values", "charts/staticip/values.yaml", "the chart's values.yaml")
	readme := flag.String("readme", "charts/staticip/README.md", "the README holding the table")
	check := flag.Bool("check", false, "fail when the README's table is stale instead of writing it")
	flag.Parse()
	if err := run(*values, *readme, *check); err != nil {
		fmt.Fprintf(os.Stderr, "helm-docs-lite: %v\n", err)
		os.Exit(1)
	}
}

func run(valuesPath, readmePath string, check bool) error {
	values, err := os.ReadFile(valuesPath)
	if err != nil {
		return err
	}
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	table, err := Table(values)
	if err != nil {
		return fmt.Errorf("%s: %w", valuesPath, err)
	}
	out, err := Splice(readme, table)
	if err != nil {
		return fmt.Errorf("%s: %w", readmePath, err)
	}
	if bytes.Equal(out, readme) {
		return nil
	}
	if check {
		return fmt.Errorf("%s: the values table is stale (values.yaml changed); run `make generate` (or tools/run.sh helm-docs-lite) and commit", readmePath)
	}
	return os.WriteFile(readmePath, out, 0o644)
}
