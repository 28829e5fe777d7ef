"""The founder steers by replying (issue 17): which launches wait for his OK (`policy`),
the request mailed to him and the decisions that consume it once (`decisions`), and his
verdicts on recaps."""
