package crdb_test

import (
	"testing"

	"github.com/orchardhq/orchard/internal/testdb"
	"github.com/orchardhq/orchard/pkg/store"
	"github.com/orchardhq/orchard/pkg/store/crdb"
	"github.com/orchardhq/orchard/pkg/store/storetest"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock store.Clock) store.Store {
		return crdb.New(testdb.Pool(t, 20), crdb.Options{Clock: clock})
	})
}
