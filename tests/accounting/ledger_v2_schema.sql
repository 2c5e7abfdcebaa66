CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS devices (dev INTEGER PRIMARY KEY, device_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS dims (
    dim INTEGER PRIMARY KEY, dev INTEGER NOT NULL, host TEXT NOT NULL, vendor TEXT NOT NULL,
    model TEXT NOT NULL, parent TEXT NOT NULL, resource_group TEXT NOT NULL, labels TEXT NOT NULL,
    UNIQUE (dev, host, vendor, model, parent, resource_group, labels));
CREATE TABLE IF NOT EXISTS intervals (
    start INTEGER NOT NULL, dev INTEGER NOT NULL, dim INTEGER NOT NULL,
    first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER,
    busy_ms INTEGER, busy_observed_ms INTEGER NOT NULL, energy_mj INTEGER,
    mem_sum INTEGER, mem_samples INTEGER NOT NULL, mem_peak INTEGER, billed_ms INTEGER,
    PRIMARY KEY (start, dev)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS users (uid INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS user_intervals (
    start INTEGER NOT NULL, dev INTEGER NOT NULL, uid INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER, busy_ms INTEGER,
    energy_mj INTEGER, billed_ms INTEGER, PRIMARY KEY (start, dev, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS quarters (
    start INTEGER NOT NULL, dim INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER,
    busy_ms INTEGER, busy_observed_ms INTEGER NOT NULL, energy_mj INTEGER,
    mem_sum INTEGER, mem_samples INTEGER NOT NULL, mem_peak INTEGER, billed_ms INTEGER,
    PRIMARY KEY (start, dim)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS user_quarters (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, uid INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER, busy_ms INTEGER,
    energy_mj INTEGER, billed_ms INTEGER, PRIMARY KEY (start, dim, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS days (
    start INTEGER NOT NULL, dim INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER,
    busy_ms INTEGER, busy_observed_ms INTEGER NOT NULL, energy_mj INTEGER,
    mem_sum INTEGER, mem_samples INTEGER NOT NULL, mem_peak INTEGER, billed_ms INTEGER,
    PRIMARY KEY (start, dim)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS user_days (
    start INTEGER NOT NULL, dim INTEGER NOT NULL, uid INTEGER NOT NULL,
    observed_ms INTEGER NOT NULL, allocated_ms INTEGER, busy_ms INTEGER,
    energy_mj INTEGER, billed_ms INTEGER, PRIMARY KEY (start, dim, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
    tier INTEGER NOT NULL, start INTEGER NOT NULL, PRIMARY KEY (tier, start)) WITHOUT ROWID;
