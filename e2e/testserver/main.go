// Command testserver is the e2e suite's workload: `testserver serve` answers HTTP with the
// pod's name, node and IP (from the downward API); `testserver get URL` and
// `testserver lookup NAME` are the client side of connectivity and DNS checks, run with
// `kubectl exec` (the image has no shell); `testserver dns` is a tiny resolver for e2e's
// "outside" network namespace.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Reply is what the server answers on every path.
type Reply struct {
	Pod      string `json:"pod"`
	Node     string `json:"node"`
	PodIP    string `json:"podIP"`
	Hostname string `json:"hostname"`
	Remote   string `json:"remote"`
	Path     string `json:"path"`
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "get":
		get(os.Args[2:])
	case "lookup":
		lookup(os.Args[2:])
	case "dnswatch":
		dnswatch(os.Args[2:])
	case "dns":
		dnsServe(os.Args[2:])
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testserver serve [--listen :8080] | get [--timeout 5s] [--count N] URL | lookup NAME | dnswatch [--interval 20ms] [--duration 5m] NAME | dns --listen ADDR:53 NAME=IPv4...")
	os.Exit(2)
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", ":8080", "address to listen on")
	_ = fs.Parse(args)
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Reply{
			Pod: os.Getenv("POD_NAME"), Node: os.Getenv("NODE_NAME"), PodIP: os.Getenv("POD_IP"),
			Hostname: host, Remote: r.RemoteAddr, Path: r.URL.Path,
		})
	})
	fmt.Printf("testserver: pod=%s node=%s ip=%s listening on %s\n", os.Getenv("POD_NAME"), os.Getenv("NODE_NAME"), os.Getenv("POD_IP"), *listen)
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
}

func get(args []string) {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	count := fs.Int("count", 1, "requests to make, each on a new connection (kube-proxy picks a backend per connection); one line per request, an error as {\"error\":...}")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	if *count > 1 {
		failed := 0
		for i := 0; i < *count; i++ {
			client := &http.Client{Timeout: *timeout, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := client.Get(fs.Arg(0))
			if err != nil {
				failed++
				b, _ := json.Marshal(map[string]string{"error": err.Error()})
				fmt.Println(string(b))
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Println(strings.TrimSpace(string(body)))
		}
		if failed > 0 {
			os.Exit(1)
		}
		return
	}
	client := &http.Client{Timeout: *timeout}
	resp, err := client.Get(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "get:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	os.Stdout.Write(body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "get: status", resp.Status)
		os.Exit(1)
	}
}

func lookup(args []string) {
	if len(args) != 1 {
		usage()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "lookup:", err)
		os.Exit(1)
	}
	for _, a := range addrs {
		fmt.Println(a)
	}
}

// dnswatch resolves NAME every --interval until --duration has passed and prints a line
// "<unix nanoseconds> <addresses, sorted, comma-separated, or - when it did not resolve>"
// each time the answer changes (and once at the start): the client side of DNS latency
// measurements (the test compares the timestamps with its own, same machine).
func dnswatch(args []string) {
	fs := flag.NewFlagSet("dnswatch", flag.ExitOnError)
	interval := fs.Duration("interval", 20*time.Millisecond, "time between lookups")
	duration := fs.Duration("duration", 5*time.Minute, "stop after this long")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	last := "\x00"
	for end := time.Now().Add(*duration); time.Now().Before(end); time.Sleep(*interval) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addrs, err := net.DefaultResolver.LookupHost(ctx, fs.Arg(0))
		cancel()
		answer := "-"
		if err == nil {
			sort.Strings(addrs)
			answer = strings.Join(addrs, ",")
		}
		if answer != last {
			fmt.Printf("%d %s\n", time.Now().UnixNano(), answer)
			last = answer
		}
	}
}

// dnsServe is a tiny authoritative resolver for the names given as NAME=IPv4 (A records, UDP):
// the "resolver outside the cluster" that a CoreDNS forward reaches in e2e/egress_test.go. It
// logs every query with its source address (the test reads whether it came NATed).
func dnsServe(args []string) {
	fs := flag.NewFlagSet("dns", flag.ExitOnError)
	listen := fs.String("listen", ":53", "UDP address to listen on")
	_ = fs.Parse(args)
	records := map[string][4]byte{}
	for _, a := range fs.Args() {
		name, ip, ok := strings.Cut(a, "=")
		addr, err := netip.ParseAddr(ip)
		if !ok || err != nil || !addr.Is4() {
			usage()
		}
		records[strings.ToLower(strings.TrimSuffix(name, "."))+"."] = addr.As4()
	}
	conn, err := net.ListenPacket("udp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dns:", err)
		os.Exit(1)
	}
	fmt.Printf("testserver: dns listening on %s\n", conn.LocalAddr())
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dns:", err)
			os.Exit(1)
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		name := strings.ToLower(q.Name.String())
		fmt.Printf("query %s %s from %s\n", name, q.Type, from)
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeNameError})
		ip, known := records[name]
		if known {
			b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
		}
		b.EnableCompression()
		_ = b.StartQuestions()
		_ = b.Question(q)
		_ = b.StartAnswers()
		if known && q.Type == dnsmessage.TypeA {
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: ip})
		}
		if msg, err := b.Finish(); err == nil {
			_, _ = conn.WriteTo(msg, from)
		}
	}
}
