package leakcheck

import (
	"testing"

	"github.com/dlock-go/dlock/internal/testsupport/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }
