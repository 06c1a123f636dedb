from summit_jobs.cli.main import main

main()
