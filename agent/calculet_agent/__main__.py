from calculet_agent.cli import main

main()
