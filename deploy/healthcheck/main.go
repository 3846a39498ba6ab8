// Command respgate-healthcheck is the probe the container images run as their HEALTHCHECK. The
// final images are distroless (no shell, curl or wget), so the probe is a static Go binary:
//
//	respgate-healthcheck [URL]
//
// It GETs URL and exits 0 on a 2xx answer, 1 otherwise (the reason goes to stderr). Without URL it
// probes respgate's readiness endpoint on the port of RESPGATE_LISTEN (default :8080), so the image's
// HEALTHCHECK keeps working when the listen address is changed:
//
//	RESPGATE_LISTEN=:9090 → http://127.0.0.1:9090/readyz
//
// /readyz answers 200 only while the store (Postgres or SQLite) is reachable. The probe follows no
// redirects and gives up after RESPGATE_HEALTHCHECK_TIMEOUT (a Go duration, default 3s).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "respgate-healthcheck:", err)
		os.Exit(1)
	}
}

// target is the URL to probe: the argument, or respgate's /readyz on the RESPGATE_LISTEN port.
func target(args []string, getenv func(string) string) (string, error) {
	switch len(args) {
	case 0:
	case 1:
		return args[0], nil
	default:
		return "", errors.New("usage: respgate-healthcheck [URL]")
	}
	listen := getenv("RESPGATE_LISTEN")
	if listen == "" {
		listen = ":8080"
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("RESPGATE_LISTEN %q: %w", listen, err)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz", nil
}

func run(args []string, getenv func(string) string) error {
	url, err := target(args, getenv)
	if err != nil {
		return err
	}
	timeout := 3 * time.Second
	if v := getenv("RESPGATE_HEALTHCHECK_TIMEOUT"); v != "" {
		if timeout, err = time.ParseDuration(v); err != nil || timeout <= 0 {
			return fmt.Errorf("RESPGATE_HEALTHCHECK_TIMEOUT %q: want a positive Go duration", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return fmt.Errorf("%s: HTTP %d: %s", url, res.StatusCode, body)
	}
	return nil
}
