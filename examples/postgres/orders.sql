-- Orders whose confirmation is queued in the same transaction (see README.md).
CREATE EXTENSION IF NOT EXISTS xtcq;
CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, item text NOT NULL);
CREATE TABLE IF NOT EXISTS sent (order_id bigint PRIMARY KEY, at timestamptz DEFAULT now());
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mailer') THEN CREATE ROLE mailer LOGIN; END IF;
END $$;
-- The workers connect as mailer; each job runs as the role that pushed it: shop, which
-- may push to queue mail and do what the job does.
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'shop') THEN CREATE ROLE shop LOGIN; END IF;
END $$;
GRANT xtcq_user TO shop;
SELECT xtcq.grant_push('mail', 'shop');
GRANT SELECT, INSERT ON orders TO shop;
GRANT USAGE ON SEQUENCE orders_id_seq TO shop;
GRANT INSERT ON sent TO shop;

-- What a worker runs per job ($1: the order id). ON CONFLICT: a job may run twice if its
-- worker dies between its commit and its ack.
CREATE OR REPLACE FUNCTION send_confirmation(order_id bigint) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO sent(order_id) SELECT id FROM orders WHERE id = order_id ON CONFLICT DO NOTHING
$$;

-- Jobs never run as a superuser: the orders are placed as shop.
SET ROLE shop;
BEGIN;
WITH o AS (INSERT INTO orders(item) VALUES ('book') RETURNING id)
SELECT xtcq.push_on_commit('mail', id::text) FROM o;
COMMIT;

BEGIN;
WITH o AS (INSERT INTO orders(item) VALUES ('lamp') RETURNING id)
SELECT xtcq.push_on_commit('mail', id::text) FROM o;
ROLLBACK;   -- no order, no e-mail job

RESET ROLE;
SELECT pg_sleep(2);   -- the workers start once the role mailer exists (retried every second)
SELECT * FROM sent;
SELECT * FROM xtcq.stats('mail');
