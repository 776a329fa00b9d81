package leakcheck

import (
	"testing"

	"github.com/dlock-go/dlock/internal/testserver"
)

func TestMain(m *testing.M) { testserver.Main(m) }
