package cli

import (
	"os/exec"
	"slices"
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
	"github.com/dlock-go/dlock/lock"
)

// BenchmarkExecTrue is the baseline: running /bin/true directly.
func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTrue is dlock run -wait 0 KEY -- true against a local Redis:
// dlock's start, connection, grant, the command, release and exit. The
// difference to BenchmarkExecTrue is what dlock adds to each job.
func BenchmarkRunTrue(b *testing.B) {
	for _, scheme := range []string{"redisnx", "rediswatch"} {
		b.Run(scheme, func(b *testing.B) {
			if !slices.Contains(lock.Schemes(), scheme) {
				b.Skipf("%s not compiled in", scheme)
			}
			url := scheme + "://" + testserver.StartRedis(b, nil).Addr()
			for b.Loop() {
				out, err := exec.Command(dlockBin, "run", "-url", url, "-wait", "0", "bench", "--", "true").CombinedOutput()
				if err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
}
