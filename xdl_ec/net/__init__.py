"""Links between processes: authenticated TCP links (their socket side and listener) and the job secret that
proves a link's membership."""
