-- One browser check per page (issue 28): the declared routes that resolve to one page (the
-- same sitemap entry, or one redirecting to the other) share its check, and each is named.
-- `declared` stays the first of them (the run's key); `routes` lists them all, in order.
ALTER TABLE synedre.qa_checks ADD COLUMN routes text[];
UPDATE synedre.qa_checks SET routes = ARRAY[declared];
ALTER TABLE synedre.qa_checks ALTER COLUMN routes SET NOT NULL;
