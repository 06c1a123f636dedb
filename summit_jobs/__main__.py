from summit_jobs.cli import main

main()
