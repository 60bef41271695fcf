package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
)

// rssMiB is a process's resident set (VmRSS) in MiB.
func rssMiB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	kb, _ := strconv.Atoi(string(m[1]))
	return float64(kb) / 1024
}

// peakRSS samples pid's RSS until stop is closed and returns the highest.
func peakRSS(t *testing.T, pid int, stop <-chan struct{}) <-chan float64 {
	out := make(chan float64, 1)
	go func() {
		peak := 0.0
		for {
			peak = max(peak, rssMiB(t, pid))
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return out
}

// flood opens n connections to addr, each sending head, a body of
// announced bytes but one, and then nothing more; they stay open until the
// test ends or close is called.
type flood struct {
	conns []net.Conn
	sent  sync.WaitGroup
}

func startFlood(t *testing.T, addr string, n int, head func() string, announced int) *flood {
	t.Helper()
	f := &flood{}
	body := strings.Repeat("a", announced-1)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d of the flood: %v", len(f.conns), err)
		}
		f.conns = append(f.conns, c)
		f.sent.Go(func() {
			// A write fails once the server answered and closed: that is
			// the refusal, not an error of the test.
			if _, err := io.WriteString(c, head()+fmt.Sprintf("Content-Length: %d\r\n\r\n", announced)); err == nil {
				c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				io.WriteString(c, body)
			}
		})
	}
	t.Cleanup(f.close)
	return f
}

func (f *flood) close() {
	for _, c := range f.conns {
		c.Close()
	}
	f.sent.Wait()
}

// metric is a sample's value in a Prometheus text page.
func metric(t *testing.T, page, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func getMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("/metrics during the flood: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// floodBoundMiB is how much the server's RSS may grow under either flood
// (docs/security.md, "Limits before authentication").
const floodBoundMiB = 150

// Issue 46, point 5: 500 unsigned connections, each sending 1 MiB − 1
// bytes of a 1 MiB body and stalling, took the server from 50 to 936 MiB.
// Now the server, started as users start it with the default limits, grows
// by less than floodBoundMiB, and a signed call of the AWS Go SDK succeeds
// while the connections stall. A second flood names a real access key with
// a wrong signature, so each request passes the header checks and has its
// body read (the Query API's, up to 512 KiB): the unauthenticated requests
// in flight stop at the cap, the others are refused with
// ThrottlingException, RSS stays under the same bound, /metrics shows it,
// the SDK's call gets ThrottlingException, and succeeds once the flood ends.
func TestFloodBeforeAuthentication(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the server with 1,000 connections")
	}
	addr := freeAddr(t)
	p := startServerProcess(t, addr, "--data-dir", t.TempDir(), "--provisioner", "none")
	pid := p.cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The SDK's own retry policy: it backs off and retries on throttling.
	client := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + addr),
		Credentials: credentials.NewStaticCredentialsProvider(testKey, testSecret, "")})
	if _, err := client.ListClusters(ctx, &ecs.ListClustersInput{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let the start settle
	base := rssMiB(t, pid)
	t.Logf("server RSS before the floods: %.1f MiB", base)

	t.Run("unsigned", func(t *testing.T) {
		stop := make(chan struct{})
		peak := peakRSS(t, pid, stop)
		head := func() string {
			return "POST / HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/x-amz-json-1.1\r\n" +
				"X-Amz-Target: AmazonEC2ContainerServiceV20141113.CreateCluster\r\n"
		}
		f := startFlood(t, addr, 500, head, 1<<20)
		f.sent.Wait()
		time.Sleep(2 * time.Second) // stalled
		if _, err := client.ListClusters(ctx, &ecs.ListClustersInput{}); err != nil {
			t.Errorf("signed call during the unsigned flood: %v", err)
		}
		now := rssMiB(t, pid)
		close(stop)
		top := <-peak
		t.Logf("unsigned flood: RSS %.1f MiB while stalled, peak %.1f MiB (base %.1f, bound +%d)", now, top, base, floodBoundMiB)
		if top > base+floodBoundMiB {
			t.Errorf("RSS peaked at %.1f MiB, over base %.1f + %d MiB", top, base, floodBoundMiB)
		}
		f.close()
	})

	t.Run("named key, wrong signature", func(t *testing.T) {
		const announced = 512 << 10 // the Query API's cap: the most read before the signature
		signed := strings.Repeat("b", announced)
		sum := sha256.Sum256([]byte(signed))
		head := func() string {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", nil)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			creds := aws.Credentials{AccessKeyID: testKey, SecretAccessKey: "not-the-secret-of-this-key"}
			if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "iam", "us-east-1", time.Now()); err != nil {
				panic(err)
			}
			var b strings.Builder
			b.WriteString("POST / HTTP/1.1\r\nHost: " + addr + "\r\n")
			req.Header.Write(&b)
			return b.String()
		}
		stop := make(chan struct{})
		peak := peakRSS(t, pid, stop)
		f := startFlood(t, addr, 500, head, announced)
		// What the cap cannot take is answered and closed.
		var mu sync.Mutex
		throttled := 0
		var readers sync.WaitGroup
		for _, c := range f.conns {
			readers.Go(func() {
				c.SetReadDeadline(time.Now().Add(15 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return // still being read: its slot is held
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 400 || !strings.Contains(string(b), "<Code>Throttling</Code>") {
					t.Errorf("a refused request of the flood: %d %s", resp.StatusCode, b)
				}
				mu.Lock()
				throttled++
				mu.Unlock()
			})
		}
		readers.Wait()
		f.sent.Wait()
		page := getMetrics(t, addr)
		inFlight := metric(t, page, "capstan_http_unauthenticated_requests")
		capacity := metric(t, page, "capstan_http_unauthenticated_requests_max")
		refused := metric(t, page, "capstan_http_unauthenticated_refused_total")
		conns := metric(t, page, "capstan_http_connections")
		t.Logf("named-key flood: %d of 500 answered Throttling; /metrics: %v in flight of %v, %v refused, %v connections",
			throttled, inFlight, capacity, refused, conns)
		if inFlight != capacity || refused < float64(500-capacity) || throttled < 500-int(capacity) {
			t.Errorf("in flight %v (cap %v), refused %v, throttled answers %d", inFlight, capacity, refused, throttled)
		}
		_, err := client.ListClusters(ctx, &ecs.ListClustersInput{})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "ThrottlingException" || !strings.Contains(ae.ErrorMessage(), "Rate exceeded") {
			t.Errorf("signed call while the slots are held: %v", err)
		}
		now := rssMiB(t, pid)
		close(stop)
		top := <-peak
		t.Logf("named-key flood: RSS %.1f MiB while stalled, peak %.1f MiB (base %.1f, bound +%d)", now, top, base, floodBoundMiB)
		if top > base+floodBoundMiB {
			t.Errorf("RSS peaked at %.1f MiB, over base %.1f + %d MiB", top, base, floodBoundMiB)
		}
		f.close()
		eventually(t, 30*time.Second, "the slots to be given back", func() bool {
			return metric(t, getMetrics(t, addr), "capstan_http_unauthenticated_requests") == 0
		})
		if _, err := client.ListClusters(ctx, &ecs.ListClustersInput{}); err != nil {
			t.Errorf("signed call after the flood: %v", err)
		}
	})
}

// The limits' flags take positive counts (the memory limit auto, off or
// MiB), and the sim provisioner, whose
// in-process agents get no CA bundle, is refused with the TLS flags: each
// stops the binary at start, naming the flags.
func TestLimitAndSimFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-connections", "0"}, "--max-connections must be at least 1 (got 0)"},
		{[]string{"--max-unauthenticated-requests", "-1"}, "--max-unauthenticated-requests must be at least 1 (got -1)"},
		{[]string{"--memory-limit", "12"}, `invalid value "12" for flag --memory-limit: must be auto, off, or a limit in MiB from 64`},
		{[]string{"--memory-limit", "lots"}, `invalid value "lots" for flag --memory-limit`},
		{[]string{"--provisioner", "sim", "--tls-self-signed"}, "--provisioner sim cannot be combined with --tls-cert/--tls-key or --tls-self-signed"},
	} {
		cmd := exec.Command(capstanBinary(t), append([]string{"server", "--listen", freeAddr(t), "--data-dir", dir}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v\n%s\nwant %q", tc.args, err, out, tc.want)
		}
	}
}
