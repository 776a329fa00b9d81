package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Scenario 7: a sustained hot key on PostgreSQL. The hot-key scenario's
// contenders (32) loop on one key for cfg.sustainDur (60 s by default,
// -sustain), with autovacuum as the server ships it: a lock whose grants
// leave dead rows slows down as they pile up, until a vacuum, and its
// grants/s in the last third of the run fall below the first third's.
// The row reports the grants/s of each third, the last third's share of
// the first's, and the dead tuples (pg_stat_user_tables.n_dead_tup) of
// the driver's tables (schema "dlock", the default) at the start and at
// the end, with the autovacuums that ran meanwhile.

const (
	scenSustain  = "7 sustained hot key, %d contenders, %v"
	sustainN     = 32
	sustainParts = 3
	pgSchema     = "dlock" // driver/postgres's default schema
)

func runSustain(ctx context.Context, cfg *config, t *table) error {
	if _, ok := cfg.addr["postgres"]; !ok || !cfg.wants("postgres") {
		return nil
	}
	var l lib
	for _, c := range libraries() {
		if c.name == "postgres" {
			l = c
		}
	}
	u := cfg.addr["postgres"]
	scen := fmt.Sprintf(scenSustain, sustainN, cfg.sustainDur)
	key := cfg.key("sustain", fmt.Sprint(sustainN))
	// One cycle first, so that the schema exists when it is read.
	c, err := l.open(ctx, u)
	if err != nil {
		return err
	}
	h, err := c.Lock(ctx, key)
	if err == nil {
		err = h.Unlock(ctx)
	}
	c.Close()
	if err != nil {
		return fmt.Errorf("sustain: first cycle: %w", err)
	}
	before, err := readTableStats(ctx, u, pgSchema)
	if err != nil {
		return err
	}
	res, err := contendPhases(ctx, l, u, sustainN, 1, cfg.sustainDur, sustainParts, func(int) string { return key })
	if err != nil {
		return fmt.Errorf("%s: %w", scen, err)
	}
	time.Sleep(time.Second) // the closed backends' statistics reach the server's
	after, err := readTableStats(ctx, u, pgSchema)
	if err != nil {
		return err
	}
	settings := autovacuumSettings(ctx, u)
	r := res.row(scen, l, true)
	r.figs = append(r.figs, res.phaseFigs()...)
	r.figs = append(r.figs, deadTupleFigs(before, after, settings)...)
	t.add(r)
	return nil
}

// phaseFigs are the grants/s of each part of the run, and the last part's
// share of the first's.
func (c *contention) phaseFigs() []figure {
	if len(c.phases) < 2 {
		return nil
	}
	part := c.dur.Seconds() / float64(len(c.phases))
	var figs []figure
	for i, g := range c.phases {
		figs = append(figs, figure{name: fmt.Sprintf("grants/s, part %d of %d", i+1, len(c.phases)), value: float64(g) / part, unit: rate, dir: higherBetter})
	}
	first, last := c.phases[0], c.phases[len(c.phases)-1]
	share := figure{name: "last part / first part", unit: ratio, note: fmt.Sprintf("%d grants, then %d", first, last)}
	if first > 0 {
		share.value = float64(last) / float64(first)
	} else {
		share.na = "not measured: no grant in the first part"
	}
	return append(figs, share)
}

// tableStats is what pg_stat_user_tables says of one table.
type tableStats struct {
	name                 string
	dead, live           int64
	autovacuums, vacuums int64
	updates, hotUpdates  int64
	inserts, deletes     int64
}

// readTableStats reads the statistics of every table of schema, by name.
func readTableStats(ctx context.Context, u, schema string) ([]tableStats, error) {
	conn, err := dialPostgres(ctx, u)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT relname, n_dead_tup, n_live_tup, autovacuum_count, vacuum_count,
		n_tup_upd, n_tup_hot_upd, n_tup_ins, n_tup_del
		FROM pg_stat_user_tables WHERE schemaname = $1 ORDER BY relname`, schema)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_user_tables: %w", err)
	}
	defer rows.Close()
	var ts []tableStats
	for rows.Next() {
		var s tableStats
		if err := rows.Scan(&s.name, &s.dead, &s.live, &s.autovacuums, &s.vacuums, &s.updates, &s.hotUpdates, &s.inserts, &s.deletes); err != nil {
			return nil, err
		}
		ts = append(ts, s)
	}
	return ts, rows.Err()
}

// autovacuumSettings says how the server vacuums, for the row's note.
func autovacuumSettings(ctx context.Context, u string) string {
	conn, err := dialPostgres(ctx, u)
	if err != nil {
		return "autovacuum settings unknown"
	}
	defer conn.Close(ctx)
	var on, nap, scale, threshold string
	err = conn.QueryRow(ctx, `SELECT current_setting('autovacuum'), current_setting('autovacuum_naptime'),
		current_setting('autovacuum_vacuum_scale_factor'), current_setting('autovacuum_vacuum_threshold')`).Scan(&on, &nap, &scale, &threshold)
	if err != nil {
		return "autovacuum settings unknown"
	}
	return fmt.Sprintf("autovacuum %s, naptime %s, vacuum at %s + %s x live rows", on, nap, threshold, scale)
}

// deadTupleFigs are the dead tuples of the schema's tables at the start
// and at the end, each table's in the note, and what ran meanwhile.
func deadTupleFigs(before, after []tableStats, settings string) []figure {
	sum := func(ts []tableStats, f func(tableStats) int64) (n int64, per string) {
		var parts []string
		for _, s := range ts {
			n += f(s)
			parts = append(parts, fmt.Sprintf("%s %d", s.name, f(s)))
		}
		return n, strings.Join(parts, ", ")
	}
	dead := func(s tableStats) int64 { return s.dead }
	d0, n0 := sum(before, dead)
	d1, n1 := sum(after, dead)
	figs := []figure{
		{name: "dead tuples at the start", value: float64(d0), unit: count, note: pgSchema + ": " + n0},
		{name: "dead tuples at the end", value: float64(d1), unit: count, note: pgSchema + ": " + n1},
	}
	if len(before) == 0 || len(after) == 0 {
		figs[0].na = "not measured: no table in schema " + pgSchema
		figs[1].na = figs[0].na
	}
	delta := func(f func(tableStats) int64) (int64, string) {
		was := map[string]int64{}
		for _, s := range before {
			was[s.name] = f(s)
		}
		d := make([]tableStats, len(after))
		for i, s := range after {
			d[i] = tableStats{name: s.name, dead: f(s) - was[s.name]}
		}
		return sum(d, dead)
	}
	av, avNote := delta(func(s tableStats) int64 { return s.autovacuums })
	figs = append(figs, figure{name: "autovacuums during the run", value: float64(av), unit: count, note: avNote + "; " + settings})
	upd, _ := delta(func(s tableStats) int64 { return s.updates })
	hot, _ := delta(func(s tableStats) int64 { return s.hotUpdates })
	ins, _ := delta(func(s tableStats) int64 { return s.inserts })
	del, _ := delta(func(s tableStats) int64 { return s.deletes })
	return append(figs, figure{name: "row writes during the run", value: float64(upd + ins + del), unit: count,
		note: fmt.Sprintf("%d updates (%d HOT), %d inserts, %d deletes", upd, hot, ins, del)})
}
